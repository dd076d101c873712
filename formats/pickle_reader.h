#pragma once
// Runs a pickle of protocol 2 as torch's pickler writes it (a TorchScript archive's data.pkl)
// as data: it builds the values the pickle describes and never calls anything. The opcodes
// run are those torch writes: PROTO, STOP, MARK, GLOBAL, the memo's puts and gets, tuples,
// lists, dicts and their appends and set-items, NEWOBJ, REDUCE, BUILD, BINPERSID, None,
// booleans, BININT*, LONG1, BINFLOAT and BINUNICODE; any other is refused.
//
// Each opcode adds at most one value, so the stack, the memo and the values are bounded by
// the pickle's size.

#include <cstdint>
#include <deque>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fedcase::formats::pickle {

using ValueId = uint32_t;
inline constexpr ValueId kNoValue = std::numeric_limits<ValueId>::max();

enum class Kind : uint8_t {
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kGlobal,
  kTuple,
  kList,
  kDict,
  kObject,
  kReduce,
  kPersistentId,
};

// "None", "int", "object", "call result" (kReduce), ... for messages.
const char* kind_name(Kind kind);

// One value the pickle built. Containers refer to their items by id, so a value the memo
// shares stays one value, as in Python. Floats keep no payload (nothing reads them); strings
// and globals view the pickle's bytes.
struct Value {
  Kind kind = Kind::kNone;
  int64_t integer = 0;         // kBool, kInt
  std::string_view text;       // kString; kGlobal: "<module>\n<name>"
  ValueId first = kNoValue;    // kObject: its class; kReduce: the callable; kPersistentId: the id
  ValueId second = kNoValue;   // kObject: its state (after BUILD); kReduce: the arguments
  std::vector<ValueId> items;  // kTuple, kList; kDict: key, value, key, value, ...
};

// A kGlobal's module ("torch._utils"), name ("_rebuild_tensor_v2"), and both, dotted.
std::string_view global_module(const Value& global);
std::string_view global_name(const Value& global);
std::string global_dotted(const Value& global);

// The values a pickle built, and the one its STOP returned. Views the pickle's bytes.
struct Unpickled {
  std::deque<Value> values;  // indexed by ValueId
  ValueId root = kNoValue;
  const Value& operator[](ValueId id) const { return values[id]; }
};

// Runs `pickle` to its STOP. Pure: may be called from any thread; the result views `pickle`,
// which must outlive it. kInvalidArgument naming `source`, what is wrong and the offset of
// the opcode at fault: a pickle that ends before its STOP, of another protocol than 2, with
// an unsupported or truncated opcode, or that pops past a MARK or an empty stack, reads an
// undefined memo key, or adds to a value of the wrong kind.
Result<Unpickled> unpickle(std::string_view pickle, std::string source);

}  // namespace fedcase::formats::pickle
