#include "ml/export.h"

#include "ml/model.h"
#include "ml/torchscript_model.h"

namespace fedcase::ml {

Result<std::string> export_torchscript(const std::string& kind, std::string_view module,
                                       const std::vector<float>& params) {
  if (kind == "torchscript") {
    auto model = TorchScriptModel::load(module);
    if (!model.ok()) {
      return invalid_argument("the job's module cannot be loaded: " + model.status().message());
    }
    FEDCASE_RETURN_IF_ERROR(model->set_parameters(params));
    return model->save();
  }
  auto model = Model::create(kind, 0);
  if (!model.ok()) return model.status();
  FEDCASE_RETURN_IF_ERROR(model->set_parameters(params));
  return model->to_torchscript();
}

}  // namespace fedcase::ml
