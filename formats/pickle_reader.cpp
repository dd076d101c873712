#include "formats/pickle_reader.h"

#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "formats/bytes.h"

namespace fedcase::formats::pickle {
namespace {

// The pickle opcodes torch's pickler writes (protocol 2), which are all this reader runs.
enum Opcode : uint8_t {
  kProto = 0x80,
  kStop = '.',
  kMark = '(',
  kGlobal = 'c',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kBinGet = 'h',
  kLongBinGet = 'j',
  kEmptyTuple = ')',
  kTuple = 't',
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kEmptyList = ']',
  kAppend = 'a',
  kAppends = 'e',
  kEmptyDict = '}',
  kSetItem = 's',
  kSetItems = 'u',
  kNewObj = 0x81,
  kReduce = 'R',
  kBuild = 'b',
  kBinPersId = 'Q',
  kNoneOp = 'N',
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kBinInt = 'J',
  kBinInt1 = 'K',
  kBinInt2 = 'M',
  kLong1 = 0x8a,
  kBinFloat = 'G',
  kBinUnicode = 'X',
};

constexpr uint8_t kPickleProtocol = 2;

// Runs a pickle as data: builds values, never calls anything. Each opcode pushes at most one
// value, so the stack, the memo and the values are bounded by the pickle's size.
class Unpickler {
 public:
  // `pickle` must outlive the unpickler; `source` names it in messages.
  Unpickler(std::string_view pickle, std::string source)
      : pickle_(pickle), source_(std::move(source)) {
    for (Kind kind : {Kind::kNone, Kind::kBool, Kind::kBool, Kind::kFloat, Kind::kTuple}) {
      values_.emplace_back().kind = kind;
    }
    values_[kTrueId].integer = 1;
  }

  // Runs the pickle to its STOP: the value it returns.
  Result<ValueId> run() {
    if (pickle_.size() >= kNoValue) return fail("too large");
    for (;;) {
      opcode_at_ = position_;
      uint8_t opcode = 0;
      if (!read(opcode)) return fail("ends before its STOP opcode");
      if (opcode == kStop) {
        if (stack_.size() <= floor()) return fail("STOP with an empty stack");
        return stack_.back();
      }
      FEDCASE_RETURN_IF_ERROR(step(opcode));
    }
  }

  // The values built; the unpickler is spent.
  std::deque<Value> take_values() { return std::move(values_); }

 private:
  static constexpr ValueId kNoneId = 0, kFalseId = 1, kTrueId = 2, kFloatId = 3, kEmptyTupleId = 4;

  Status fail(const std::string& what) const {
    return invalid_argument(source_ + ": " + what + " (opcode at offset " +
                            std::to_string(opcode_at_) + ")");
  }
  Status truncated() const { return fail("truncated opcode"); }

  template <class T>
  bool read(T& value) {
    if (!load(pickle_, position_, value)) return false;
    position_ += sizeof(T);
    return true;
  }
  bool read_bytes(uint64_t count, std::string_view& bytes) {
    if (count > pickle_.size() - position_) return false;
    bytes = pickle_.substr(position_, count);
    position_ += count;
    return true;
  }
  bool read_line(std::string_view& line) {
    const size_t end = pickle_.find('\n', position_);
    if (end == std::string_view::npos) return false;
    line = pickle_.substr(position_, end - position_);
    position_ = end + 1;
    return true;
  }

  Value& add(Kind kind) {
    Value& value = values_.emplace_back();
    value.kind = kind;
    stack_.push_back(static_cast<ValueId>(values_.size() - 1));
    return value;
  }
  // Reads the opcode's argument, a little-endian T, and passes it on to `then`.
  template <class T, class Argument>
  Status with_argument(Status (Unpickler::*then)(Argument)) {
    T argument{};
    if (!read(argument)) return truncated();
    return (this->*then)(argument);
  }
  Status check_protocol(uint8_t protocol) {
    if (protocol == kPickleProtocol) return ok_status();
    return fail("unsupported pickle protocol " + std::to_string(protocol) +
                " (TorchScript archives use protocol 2)");
  }
  Status push_integer(int64_t integer) {
    add(Kind::kInt).integer = integer;
    return ok_status();
  }
  // Where the values above the innermost MARK start; below it nothing may be popped or read,
  // as in Python 3.
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }

  Status pop(ValueId& id) {
    if (stack_.size() <= floor()) return fail("pop from an empty stack");
    id = stack_.back();
    stack_.pop_back();
    return ok_status();
  }
  Status pop_kind(Kind kind, ValueId& id) {
    FEDCASE_RETURN_IF_ERROR(pop(id));
    if (values_[id].kind != kind) {
      return fail(std::string("expected a ") + kind_name(kind) + ", found a " +
                  kind_name(values_[id].kind));
    }
    return ok_status();
  }
  Status pop_to_mark(std::vector<ValueId>& items) {
    if (marks_.empty()) return fail("no MARK to pop to");
    items.assign(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return ok_status();
  }
  Status top_kind(Kind kind, Value*& value) {
    if (stack_.size() <= floor()) return fail("empty stack");
    value = &values_[stack_.back()];
    if (value->kind != kind) {
      return fail(std::string("expected a ") + kind_name(kind) + " to add to, found a " +
                  kind_name(value->kind));
    }
    return ok_status();
  }
  Status memo_put(uint32_t key) {
    if (stack_.size() <= floor()) return fail("memo put from an empty stack");
    memo_[key] = stack_.back();
    return ok_status();
  }
  Status memo_get(uint32_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) return fail("memo key " + std::to_string(key) + " is not defined");
    stack_.push_back(it->second);
    return ok_status();
  }
  Status make_tuple(size_t count) {
    if (stack_.size() < floor() + count) {
      return fail("too few values for a tuple");
    }
    std::vector<ValueId> items(stack_.end() - static_cast<std::ptrdiff_t>(count), stack_.end());
    stack_.resize(stack_.size() - count);
    add(Kind::kTuple).items = std::move(items);
    return ok_status();
  }
  // Pops the arguments tuple and the global under it: NEWOBJ's class, REDUCE's callable.
  Status make_call(Kind kind) {
    ValueId arguments = kNoValue, callable = kNoValue;
    FEDCASE_RETURN_IF_ERROR(pop_kind(Kind::kTuple, arguments));
    FEDCASE_RETURN_IF_ERROR(pop_kind(Kind::kGlobal, callable));
    Value& value = add(kind);
    value.first = callable;
    if (kind == Kind::kReduce) value.second = arguments;
    return ok_status();
  }

  Status step(uint8_t opcode) {
    switch (opcode) {
      case kProto:
        return with_argument<uint8_t>(&Unpickler::check_protocol);
      case kMark:
        marks_.push_back(stack_.size());
        return ok_status();
      case kGlobal: {
        const size_t start = position_;
        std::string_view module, name;
        if (!read_line(module) || !read_line(name)) return truncated();
        add(Kind::kGlobal).text = pickle_.substr(start, module.size() + 1 + name.size());
        return ok_status();
      }
      case kBinPut:
        return with_argument<uint8_t>(&Unpickler::memo_put);
      case kLongBinPut:
        return with_argument<uint32_t>(&Unpickler::memo_put);
      case kBinGet:
        return with_argument<uint8_t>(&Unpickler::memo_get);
      case kLongBinGet:
        return with_argument<uint32_t>(&Unpickler::memo_get);
      case kEmptyTuple:
        stack_.push_back(kEmptyTupleId);
        return ok_status();
      case kTuple: {
        std::vector<ValueId> items;
        FEDCASE_RETURN_IF_ERROR(pop_to_mark(items));
        add(Kind::kTuple).items = std::move(items);
        return ok_status();
      }
      case kTuple1:
        return make_tuple(1);
      case kTuple2:
        return make_tuple(2);
      case kTuple3:
        return make_tuple(3);
      case kEmptyList:
        add(Kind::kList);
        return ok_status();
      case kEmptyDict:
        add(Kind::kDict);
        return ok_status();
      case kAppend:
      case kSetItem: {
        const size_t count = opcode == kAppend ? 1 : 2;
        std::vector<ValueId> items(count);
        for (size_t i = count; i-- > 0;) FEDCASE_RETURN_IF_ERROR(pop(items[i]));
        Value* container = nullptr;
        FEDCASE_RETURN_IF_ERROR(top_kind(opcode == kAppend ? Kind::kList : Kind::kDict, container));
        container->items.insert(container->items.end(), items.begin(), items.end());
        return ok_status();
      }
      case kAppends:
      case kSetItems: {
        std::vector<ValueId> items;
        FEDCASE_RETURN_IF_ERROR(pop_to_mark(items));
        if (opcode == kSetItems && items.size() % 2 != 0) return fail("SETITEMS of an odd count");
        Value* container = nullptr;
        FEDCASE_RETURN_IF_ERROR(
            top_kind(opcode == kAppends ? Kind::kList : Kind::kDict, container));
        container->items.insert(container->items.end(), items.begin(), items.end());
        return ok_status();
      }
      case kNewObj:
        return make_call(Kind::kObject);
      case kReduce:
        return make_call(Kind::kReduce);
      case kBuild: {
        ValueId state = kNoValue;
        FEDCASE_RETURN_IF_ERROR(pop(state));
        Value* object = nullptr;
        FEDCASE_RETURN_IF_ERROR(top_kind(Kind::kObject, object));
        object->second = state;
        return ok_status();
      }
      case kBinPersId: {
        ValueId id = kNoValue;
        FEDCASE_RETURN_IF_ERROR(pop(id));
        add(Kind::kPersistentId).first = id;
        return ok_status();
      }
      case kNoneOp:
        stack_.push_back(kNoneId);
        return ok_status();
      case kNewTrue:
      case kNewFalse:
        stack_.push_back(opcode == kNewTrue ? kTrueId : kFalseId);
        return ok_status();
      case kBinInt1:
        return with_argument<uint8_t>(&Unpickler::push_integer);
      case kBinInt2:
        return with_argument<uint16_t>(&Unpickler::push_integer);
      case kBinInt:
        return with_argument<int32_t>(&Unpickler::push_integer);
      case kLong1: {
        uint8_t size = 0;
        std::string_view bytes;
        if (!read(size) || !read_bytes(size, bytes)) return truncated();
        if (size > sizeof(int64_t)) return fail("LONG1 of more than 8 bytes");
        uint64_t integer = 0;
        std::memcpy(&integer, bytes.data(), bytes.size());
        const unsigned bits = 8 * static_cast<unsigned>(size);
        if (size > 0 && size < sizeof(int64_t) && (integer >> (bits - 1)) & 1) {
          integer |= ~uint64_t{0} << bits;  // sign-extend
        }
        return push_integer(static_cast<int64_t>(integer));
      }
      case kBinFloat: {
        std::string_view bytes;
        if (!read_bytes(sizeof(double), bytes)) return truncated();
        stack_.push_back(kFloatId);
        return ok_status();
      }
      case kBinUnicode: {
        uint32_t size = 0;
        std::string_view text;
        if (!read(size) || !read_bytes(size, text)) return truncated();
        add(Kind::kString).text = text;
        return ok_status();
      }
      default: {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "0x%02x", opcode);
        return fail(std::string("unsupported pickle opcode ") + hex);
      }
    }
  }

  std::string_view pickle_;
  const std::string source_;
  size_t position_ = 0;
  size_t opcode_at_ = 0;
  std::deque<Value> values_;  // a deque: references stay valid as it grows
  std::vector<ValueId> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, ValueId> memo_;
};

}  // namespace

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "string";
    case Kind::kGlobal:
      return "global";
    case Kind::kTuple:
      return "tuple";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kObject:
      return "object";
    case Kind::kReduce:
      return "call result";
    case Kind::kPersistentId:
      return "persistent id";
  }
  return "value";
}

std::string_view global_module(const Value& global) {
  return global.text.substr(0, global.text.find('\n'));
}
std::string_view global_name(const Value& global) {
  return global.text.substr(global.text.find('\n') + 1);
}
std::string global_dotted(const Value& global) {
  return std::string(global_module(global)) + "." + std::string(global_name(global));
}

Result<Unpickled> unpickle(std::string_view pickle, std::string source) {
  Unpickler unpickler(pickle, std::move(source));
  auto root = unpickler.run();
  if (!root.ok()) return root.status();
  return Unpickled{unpickler.take_values(), *root};
}

}  // namespace fedcase::formats::pickle
