#include "common/torchscript_archive.h"

#include <zlib.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fedcase {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "zip fields and torch storages are little-endian");

std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

// Reads the little-endian T at `offset` of `bytes`; false when it does not fit.
template <class T>
bool load(std::string_view bytes, uint64_t offset, T& value) {
  if (offset > bytes.size() || bytes.size() - offset < sizeof(T)) return false;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return true;
}

// ---- Zip archive ----------------------------------------------------------------------------

constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint64_t kLocalHeaderSize = 30;
constexpr uint64_t kCentralHeaderSize = 46;
constexpr uint64_t kEndSize = 22;
constexpr uint64_t kMaxCommentSize = 0xFFFF;
constexpr uint64_t kZip64LocatorSize = 20;
constexpr uint64_t kZip64EndSize = 56;
constexpr uint16_t kZip64ExtraTag = 0x0001;
constexpr uint64_t kZip64Saturated = 0xFFFFFFFF;
constexpr uint16_t kFlagEncrypted = 0x0001;
constexpr uint16_t kMethodStored = 0;
constexpr uint16_t kMethodDeflated = 8;

Status not_a_zip(const std::string& why) { return invalid_argument("not a zip archive: " + why); }

struct ZipEntry {
  std::string_view name;
  uint16_t flags = 0;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t compressed_size = 0;
  uint64_t size = 0;
  uint64_t local_header_offset = 0;
};

// Where the central directory lies, from the end of central directory record or, when the
// archive has one (torch always writes it), the zip64 record.
struct CentralDirectory {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t entries = 0;
  uint64_t trailer_offset = 0;  // where the records after the central directory start
};

Result<CentralDirectory> find_central_directory(std::string_view bytes) {
  if (bytes.size() < kEndSize) return not_a_zip("too short");
  // The end record closes the archive, followed only by a comment of up to 65535 bytes.
  const uint64_t lowest =
      bytes.size() > kEndSize + kMaxCommentSize ? bytes.size() - kEndSize - kMaxCommentSize : 0;
  uint64_t end = bytes.size() - kEndSize;
  for (;; --end) {
    uint32_t signature = 0;
    uint16_t comment_size = 0;
    if (load(bytes, end, signature) && signature == kEndSignature &&
        load(bytes, end + 20, comment_size) && end + kEndSize + comment_size == bytes.size()) {
      break;
    }
    if (end == lowest) return not_a_zip("no end of central directory record");
  }
  uint16_t disk = 0, directory_disk = 0, disk_entries = 0, entries = 0;
  uint32_t size = 0, offset = 0;
  load(bytes, end + 4, disk);
  load(bytes, end + 6, directory_disk);
  load(bytes, end + 8, disk_entries);
  load(bytes, end + 10, entries);
  load(bytes, end + 12, size);
  load(bytes, end + 16, offset);
  CentralDirectory directory{offset, size, entries, end};
  bool one_disk = disk == 0 && directory_disk == 0 && disk_entries == entries;

  uint32_t locator_signature = 0;
  if (end >= kZip64LocatorSize && load(bytes, end - kZip64LocatorSize, locator_signature) &&
      locator_signature == kZip64LocatorSignature) {
    const uint64_t locator = end - kZip64LocatorSize;
    uint64_t record = 0;
    uint32_t record_signature = 0, disk64 = 0, directory_disk64 = 0;
    uint64_t disk_entries64 = 0;
    load(bytes, locator + 8, record);
    if (record > locator || locator - record < kZip64EndSize ||
        !load(bytes, record, record_signature) || record_signature != kZip64EndSignature) {
      return not_a_zip("bad zip64 end of central directory record");
    }
    load(bytes, record + 16, disk64);
    load(bytes, record + 20, directory_disk64);
    load(bytes, record + 24, disk_entries64);
    load(bytes, record + 32, directory.entries);
    load(bytes, record + 40, directory.size);
    load(bytes, record + 48, directory.offset);
    directory.trailer_offset = record;
    one_disk = disk64 == 0 && directory_disk64 == 0 && disk_entries64 == directory.entries;
  } else if (offset == kZip64Saturated || size == kZip64Saturated) {
    return not_a_zip("zip64 fields without a zip64 end of central directory record");
  }
  if (!one_disk) return not_a_zip("it spans several disks");
  if (directory.offset > directory.trailer_offset ||
      directory.size != directory.trailer_offset - directory.offset) {
    return not_a_zip("the central directory does not end where its end record starts");
  }
  if (directory.entries > directory.size / kCentralHeaderSize) {
    return not_a_zip("the central directory is too small for its entry count");
  }
  return directory;
}

// Replaces the fields of `entry` that the central directory saturated (0xFFFFFFFF) with their
// 64-bit values, which the zip64 extra field holds in this order.
Status apply_zip64_extra(std::string_view extra, ZipEntry& entry) {
  uint64_t* fields[] = {&entry.size, &entry.compressed_size, &entry.local_header_offset};
  bool saturated = false;
  for (const uint64_t* field : fields) saturated = saturated || *field == kZip64Saturated;
  if (!saturated) return ok_status();
  const Status missing = not_a_zip("entry " + quoted(entry.name) + " lacks its zip64 sizes");
  uint64_t at = 0;
  uint16_t tag = 0, length = 0;
  while (load(extra, at, tag) && load(extra, at + 2, length)) {
    const uint64_t data = at + 4;
    if (length > extra.size() - data) break;
    if (tag == kZip64ExtraTag) {
      const std::string_view values = extra.substr(data, length);
      uint64_t next = 0;
      for (uint64_t* field : fields) {
        if (*field != kZip64Saturated) continue;
        if (!load(values, next, *field)) return missing;
        next += sizeof(uint64_t);
      }
      return ok_status();
    }
    at = data + length;
  }
  return missing;
}

Result<std::string> inflate_entry(std::string_view compressed, const ZipEntry& entry) {
  if (compressed.size() > UINT_MAX || entry.size > UINT_MAX) {
    return invalid_argument("zip entry " + quoted(entry.name) + " is too large to inflate");
  }
  std::string inflated(entry.size, '\0');
  z_stream stream{};
  if (inflateInit2(&stream, -MAX_WBITS) != Z_OK) return internal_error("zlib inflateInit2 failed");
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  stream.avail_in = static_cast<uInt>(compressed.size());
  stream.next_out = reinterpret_cast<Bytef*>(inflated.data());
  stream.avail_out = static_cast<uInt>(inflated.size());
  const bool complete = inflate(&stream, Z_FINISH) == Z_STREAM_END && stream.avail_out == 0;
  inflateEnd(&stream);
  if (!complete) {
    return invalid_argument("zip entry " + quoted(entry.name) + " does not inflate to its " +
                            std::to_string(entry.size) + " bytes");
  }
  return inflated;
}

// The entries of a zip archive, and the data of those read so far.
class ZipArchive {
 public:
  // Inflates at most `max_inflated_bytes`, all entries together.
  explicit ZipArchive(uint64_t max_inflated_bytes) : inflate_budget_(max_inflated_bytes) {}

  // Indexes the central directory of `bytes`, which must outlive the archive.
  Status open(std::string_view bytes) {
    bytes_ = bytes;
    auto directory = find_central_directory(bytes);
    if (!directory.ok()) return directory.status();
    data_end_ = directory->offset;
    entries_.reserve(directory->entries);
    const uint64_t end = directory->offset + directory->size;
    uint64_t at = directory->offset;
    for (uint64_t i = 0; i < directory->entries; ++i) {
      uint32_t signature = 0, compressed_size = 0, size = 0, local_header_offset = 0;
      uint16_t name_size = 0, extra_size = 0, comment_size = 0;
      ZipEntry entry;
      if (end - at < kCentralHeaderSize || !load(bytes, at, signature) ||
          signature != kCentralHeaderSignature) {
        return not_a_zip("bad central directory entry " + std::to_string(i));
      }
      load(bytes, at + 8, entry.flags);
      load(bytes, at + 10, entry.method);
      load(bytes, at + 16, entry.crc);
      load(bytes, at + 20, compressed_size);
      load(bytes, at + 24, size);
      load(bytes, at + 28, name_size);
      load(bytes, at + 30, extra_size);
      load(bytes, at + 32, comment_size);
      load(bytes, at + 42, local_header_offset);
      const uint64_t name_at = at + kCentralHeaderSize;
      if (end - name_at < uint64_t{name_size} + extra_size + comment_size) {
        return not_a_zip("central directory entry " + std::to_string(i) + " is truncated");
      }
      entry.name = bytes.substr(name_at, name_size);
      entry.compressed_size = compressed_size;
      entry.size = size;
      entry.local_header_offset = local_header_offset;
      FEDCASE_RETURN_IF_ERROR(
          apply_zip64_extra(bytes.substr(name_at + name_size, extra_size), entry));
      if (!index_.emplace(entry.name, entries_.size()).second) {
        return invalid_argument("zip archive holds two entries named " + quoted(entry.name));
      }
      entries_.push_back(entry);
      at = name_at + name_size + extra_size + comment_size;
    }
    return ok_status();
  }

  const std::vector<ZipEntry>& entries() const { return entries_; }

  const ZipEntry* find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &entries_[it->second];
  }

  // The data of `entry`, inflated if it is compressed and checked against its CRC-32;
  // kInvalidArgument when it is larger than `max_size` bytes. The view lives as long as the
  // archive and its bytes.
  Result<std::string_view> read(const ZipEntry& entry, uint64_t max_size) {
    if (entry.size > max_size) {
      return invalid_argument("zip entry " + quoted(entry.name) + " of " +
                              std::to_string(entry.size) + " bytes exceeds the limit of " +
                              std::to_string(max_size));
    }
    auto cached = read_.find(&entry);
    if (cached != read_.end()) return cached->second;
    if (entry.flags & kFlagEncrypted) {
      return invalid_argument("zip entry " + quoted(entry.name) + " is encrypted");
    }
    auto stored = stored_data(entry);
    if (!stored.ok()) return stored.status();
    std::string_view data;
    if (entry.method == kMethodStored) {
      if (stored->size() != entry.size) {
        return invalid_argument("stored zip entry " + quoted(entry.name) +
                                " has different compressed and uncompressed sizes");
      }
      data = *stored;
    } else if (entry.method == kMethodDeflated) {
      if (entry.size > inflate_budget_) {
        return invalid_argument("the archive's entries inflate to more bytes than its limit");
      }
      inflate_budget_ -= entry.size;
      auto inflated = inflate_entry(*stored, entry);
      if (!inflated.ok()) return inflated.status();
      data = inflated_.emplace_back(std::move(*inflated));
    } else {
      return invalid_argument("zip entry " + quoted(entry.name) +
                              " uses unsupported compression method " +
                              std::to_string(entry.method));
    }
    if (crc32_of(data) != entry.crc) {
      return invalid_argument("zip entry " + quoted(entry.name) + " fails its CRC-32 check");
    }
    read_.emplace(&entry, data);
    return data;
  }

 private:
  // The data of `entry` as the archive stores it: after its local header's name and extra
  // field (whose lengths can differ from the central directory's), before the directory.
  Result<std::string_view> stored_data(const ZipEntry& entry) const {
    const uint64_t at = entry.local_header_offset;
    uint32_t signature = 0;
    uint16_t name_size = 0, extra_size = 0;
    if (!load(bytes_, at, signature) || signature != kLocalHeaderSignature ||
        !load(bytes_, at + 26, name_size) || !load(bytes_, at + 28, extra_size)) {
      return invalid_argument("zip entry " + quoted(entry.name) + " has no local header");
    }
    const uint64_t data = at + kLocalHeaderSize + name_size + extra_size;
    if (data > data_end_ || entry.compressed_size > data_end_ - data) {
      return invalid_argument("zip entry " + quoted(entry.name) +
                              " extends beyond the archive's data");
    }
    if (bytes_.substr(at + kLocalHeaderSize, name_size) != entry.name) {
      return invalid_argument("the local header of zip entry " + quoted(entry.name) +
                              " names another entry");
    }
    return bytes_.substr(data, entry.compressed_size);
  }

  std::string_view bytes_;
  uint64_t data_end_ = 0;
  std::vector<ZipEntry> entries_;
  std::unordered_map<std::string_view, size_t> index_;
  std::unordered_map<const ZipEntry*, std::string_view> read_;
  uint64_t inflate_budget_;
  std::deque<std::string> inflated_;
};

// ---- Pickle ---------------------------------------------------------------------------------

using ValueId = uint32_t;
constexpr ValueId kNoValue = std::numeric_limits<ValueId>::max();

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

// One value the pickle built. Containers refer to their items by id, so a value the memo
// shares stays one value, as in Python. Floats keep no payload: nothing here reads them.
struct Value {
  Kind kind = Kind::kNone;
  int64_t integer = 0;         // kBool, kInt
  std::string_view text;       // kString; kGlobal: "<module>\n<name>"
  ValueId first = kNoValue;    // kObject: its class; kReduce: the callable; kPersistentId: the id
  ValueId second = kNoValue;   // kObject: its state (after BUILD); kReduce: the arguments
  std::vector<ValueId> items;  // kTuple, kList; kDict: key, value, key, value, ...
};

std::string_view global_module(const Value& global) {
  return global.text.substr(0, global.text.find('\n'));
}
std::string_view global_name(const Value& global) {
  return global.text.substr(global.text.find('\n') + 1);
}
std::string global_dotted(const Value& global) {
  return std::string(global_module(global)) + "." + std::string(global_name(global));
}

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

  const Value& operator[](ValueId id) const { return values_[id]; }

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

// ---- TorchScript classes --------------------------------------------------------------------

// What a class's source declares: whether it is a module, and its parameters' names.
struct ClassDeclaration {
  bool is_module = false;
  std::set<std::string_view> parameters;
};

// Parses the list after `__parameters__ = `, as torch prints it: ["weight", "bias", ].
Result<std::set<std::string_view>> parse_name_list(std::string_view list) {
  const Status malformed = invalid_argument("malformed __parameters__ list: " + std::string(list));
  std::set<std::string_view> names;
  if (list.empty() || list[0] != '[') return malformed;
  size_t at = 1;
  for (;;) {
    while (at < list.size() && list[at] == ' ') ++at;
    if (at == list.size()) return malformed;
    if (list[at] == ']') return names;
    if (list[at] != '"') return malformed;
    const size_t close = list.find('"', at + 1);
    if (close == std::string_view::npos) return malformed;
    const std::string_view name = list.substr(at + 1, close - at - 1);
    if (name.find('\\') != std::string_view::npos) return malformed;
    names.insert(name);
    at = close + 1;
    while (at < list.size() && list[at] == ' ') ++at;
    if (at < list.size() && list[at] == ',') ++at;
  }
}

// Finds `class <name>` in `source`, a code file as torch prints it: the class line at the
// start of a line, its body indented.
Result<ClassDeclaration> parse_class(std::string_view source, std::string_view name,
                                     const std::string& file) {
  constexpr std::string_view kParametersLine = "  __parameters__ = ";
  const std::string header = "class " + std::string(name);
  bool in_class = false, found_parameters = false;
  ClassDeclaration declaration;
  for (size_t at = 0; at < source.size();) {
    const size_t end = std::min(source.find('\n', at), source.size());
    const std::string_view line = source.substr(at, end - at);
    at = end + 1;
    if (in_class) {
      if (!line.empty() && line[0] != ' ') break;  // the class's body has ended
      if (line.substr(0, kParametersLine.size()) == kParametersLine) {
        auto names = parse_name_list(line.substr(kParametersLine.size()));
        if (!names.ok()) return invalid_argument(file + ": " + names.status().message());
        declaration.parameters = std::move(*names);
        found_parameters = true;
      }
    } else if (line.substr(0, header.size()) == header && line.size() > header.size() &&
               (line[header.size()] == '(' || line[header.size()] == ':')) {
      in_class = true;
      declaration.is_module = line.substr(header.size()) == "(Module):";
    }
  }
  if (!in_class) return invalid_argument(file + " defines no class " + quoted(name));
  if (declaration.is_module && !found_parameters) {
    return invalid_argument(file + ": module class " + quoted(name) +
                            " declares no __parameters__");
  }
  return declaration;
}

// ---- Parameters -----------------------------------------------------------------------------

constexpr std::string_view kTorchScriptPrefix = "__torch__";

// The dtype torch names a storage type after, for messages.
std::string dtype_of_storage(std::string_view storage) {
  static constexpr std::pair<std::string_view, std::string_view> kDtypes[] = {
      {"FloatStorage", "float32"},
      {"DoubleStorage", "float64"},
      {"HalfStorage", "float16"},
      {"BFloat16Storage", "bfloat16"},
      {"LongStorage", "int64"},
      {"IntStorage", "int32"},
      {"ShortStorage", "int16"},
      {"CharStorage", "int8"},
      {"ByteStorage", "uint8"},
      {"BoolStorage", "bool"},
      {"ComplexFloatStorage", "complex64"},
      {"ComplexDoubleStorage", "complex128"},
  };
  for (const auto& [name, dtype] : kDtypes) {
    if (name == storage) return std::string(dtype);
  }
  return "of torch." + std::string(storage);
}

// A parameter found, and its float32 elements in the archive.
struct FoundParameter {
  TensorSpec spec;
  std::string_view elements;
};

// Walks the module tree the pickle built, in named_parameters order, and finds each
// parameter's storage in the archive.
class ParameterFinder {
 public:
  ParameterFinder(ZipArchive& archive, const Unpickler& pickle, std::string root,
                  const TorchScriptLimits& limits)
      : archive_(archive), pickle_(pickle), root_(std::move(root)), limits_(limits) {}

  Status find_in_root(ValueId root) {
    const Value& module = pickle_[root];
    if (module.kind != Kind::kObject) {
      return invalid_argument(std::string("data.pkl holds a ") + kind_name(module.kind) +
                              ", not a module object");
    }
    auto declaration = declaration_of(module);
    if (!declaration.ok()) return declaration.status();
    if (*declaration == nullptr || !(*declaration)->is_module) {
      return invalid_argument("data.pkl holds an object of class " +
                              global_dotted(pickle_[module.first]) + ", not a module");
    }
    return find_in_module(root, **declaration, "", 0);
  }

  const std::vector<FoundParameter>& found() const { return found_; }
  uint64_t element_count() const { return element_count_; }

 private:
  // The declaration of `object`'s class; null for a class outside TorchScript's __torch__
  // namespace, which cannot be a module.
  Result<const ClassDeclaration*> declaration_of(const Value& object) {
    const Value& type = pickle_[object.first];
    const std::string dotted = global_dotted(type);
    auto cached = declarations_.find(dotted);
    if (cached != declarations_.end()) return &cached->second;
    const std::string_view module = global_module(type);
    if (module.substr(0, kTorchScriptPrefix.size()) != kTorchScriptPrefix ||
        (module.size() > kTorchScriptPrefix.size() && module[kTorchScriptPrefix.size()] != '.')) {
      return static_cast<const ClassDeclaration*>(nullptr);
    }
    std::string file = root_ + "/code/" + std::string(module) + ".py";
    for (size_t i = root_.size() + 6; i < file.size() - 3; ++i) {
      if (file[i] == '.') file[i] = '/';
    }
    const ZipEntry* entry = archive_.find(file);
    if (entry == nullptr) {
      return invalid_argument("no code for class " + quoted(dotted) + " (no " + file + ")");
    }
    if (code_files_.insert(file).second) {
      if (entry->size > limits_.max_code_bytes - code_bytes_) {
        return invalid_argument("the code the module's classes need exceeds the limit of " +
                                std::to_string(limits_.max_code_bytes) + " bytes");
      }
      code_bytes_ += entry->size;
    }
    auto source = archive_.read(*entry, limits_.max_code_bytes);
    if (!source.ok()) return source.status();
    auto declaration = parse_class(*source, global_name(type), file);
    if (!declaration.ok()) return declaration.status();
    return &declarations_.emplace(dotted, std::move(*declaration)).first->second;
  }

  Status find_in_module(ValueId id, const ClassDeclaration& declaration, const std::string& path,
                        size_t depth) {
    const std::string where = path.empty() ? "the root module" : "module " + quoted(path);
    if (!visited_.insert(id).second) {
      return invalid_argument(where +
                              " is a module object met before; shared or cyclic "
                              "submodules are not supported");
    }
    const Value& module = pickle_[id];
    if (module.second == kNoValue) return invalid_argument(where + " has no state (no BUILD)");
    const Value& state = pickle_[module.second];
    if (state.kind != Kind::kDict) {
      return invalid_argument(where + " has a custom state (a " + kind_name(state.kind) +
                              ", from __getstate__), which is not supported");
    }
    std::set<std::string_view> attributes;
    for (size_t i = 0; i + 1 < state.items.size(); i += 2) {
      const Value& key = pickle_[state.items[i]];
      const ValueId value_id = state.items[i + 1];
      if (key.kind != Kind::kString) {
        return invalid_argument(where + " has an attribute named by a " + kind_name(key.kind));
      }
      if (key.text.empty()) return invalid_argument(where + " has an attribute with no name");
      if (!attributes.insert(key.text).second) {
        return invalid_argument(where + " sets attribute " + quoted(key.text) + " twice");
      }
      const std::string name =
          path.empty() ? std::string(key.text) : path + "." + std::string(key.text);
      if (declaration.parameters.count(key.text) > 0) {
        FEDCASE_RETURN_IF_ERROR(find_parameter(name, pickle_[value_id]));
        continue;
      }
      const Value& value = pickle_[value_id];
      if (value.kind != Kind::kObject) continue;
      auto submodule = declaration_of(value);
      if (!submodule.ok()) return submodule.status();
      if (*submodule == nullptr || !(*submodule)->is_module) continue;
      if (depth == limits_.max_module_depth) {
        return invalid_argument("submodule " + quoted(name) + " lies " + std::to_string(depth + 1) +
                                " levels deep, past the limit of " +
                                std::to_string(limits_.max_module_depth));
      }
      FEDCASE_RETURN_IF_ERROR(find_in_module(value_id, **submodule, name, depth + 1));
    }
    return ok_status();
  }

  // The non-negative integers of `tuple` (sizes or strides).
  static bool read_dims(const Unpickler& pickle, const Value& tuple, std::vector<uint64_t>& dims) {
    if (tuple.kind != Kind::kTuple) return false;
    for (ValueId item : tuple.items) {
      const Value& dim = pickle[item];
      if (dim.kind != Kind::kInt || dim.integer < 0) return false;
      dims.push_back(static_cast<uint64_t>(dim.integer));
    }
    return true;
  }

  Status find_parameter(const std::string& name, const Value& tensor) {
    if (tensor.kind == Kind::kNone) return ok_status();  // an unset optional parameter
    const std::string parameter = "parameter " + quoted(name);
    if (found_.size() == limits_.max_tensors) {
      return invalid_argument("the module has more than " + std::to_string(limits_.max_tensors) +
                              " parameters");
    }
    if (name.size() > kMaxTensorNameBytes) {
      return invalid_argument(parameter + " has a name longer than " +
                              std::to_string(kMaxTensorNameBytes) + " bytes");
    }
    if (tensor.kind != Kind::kReduce) {
      return invalid_argument(parameter + " is a " + kind_name(tensor.kind) + ", not a tensor");
    }
    const Value& rebuild = pickle_[tensor.first];
    if (global_module(rebuild) != "torch._utils" || global_name(rebuild) != "_rebuild_tensor_v2") {
      return invalid_argument(parameter + " is not a dense tensor (it is built by " +
                              global_dotted(rebuild) + ")");
    }
    const std::vector<ValueId>& arguments = pickle_[tensor.second].items;
    const Status malformed = invalid_argument(parameter + " has malformed tensor arguments");
    if (arguments.size() < 4 || pickle_[arguments[0]].kind != Kind::kPersistentId) {
      return malformed;
    }
    // ('storage', torch.<Type>Storage, key, device, element count)
    const Value& storage_id = pickle_[pickle_[arguments[0]].first];
    const std::vector<ValueId>& id = storage_id.items;
    if (storage_id.kind != Kind::kTuple || id.size() != 5 || pickle_[id[0]].kind != Kind::kString ||
        pickle_[id[0]].text != "storage" || pickle_[id[1]].kind != Kind::kGlobal ||
        pickle_[id[2]].kind != Kind::kString || pickle_[id[3]].kind != Kind::kString ||
        pickle_[id[4]].kind != Kind::kInt || pickle_[id[4]].integer < 0) {
      return invalid_argument(parameter + " has a malformed storage id");
    }
    const Value& storage_type = pickle_[id[1]];
    if (global_module(storage_type) != "torch" || global_name(storage_type) != "FloatStorage") {
      return invalid_argument(
          parameter + " has dtype " + dtype_of_storage(global_name(storage_type)) + " (" +
          global_dotted(storage_type) + "); only float32 parameters are supported");
    }
    const Value& offset = pickle_[arguments[1]];
    std::vector<uint64_t> sizes, strides;
    if (offset.kind != Kind::kInt || offset.integer < 0 ||
        !read_dims(pickle_, pickle_[arguments[2]], sizes) ||
        !read_dims(pickle_, pickle_[arguments[3]], strides) || sizes.size() != strides.size()) {
      return malformed;
    }
    if (sizes.size() > kMaxTensorRank) {
      return invalid_argument(parameter + " has rank " + std::to_string(sizes.size()) +
                              ", more than " + std::to_string(kMaxTensorRank));
    }
    // The element count, computed without overflow: over the budget is too many.
    const uint64_t budget = limits_.max_elements - element_count_;
    uint64_t elements = 1;
    for (uint64_t size : sizes) elements = size == 0 ? 0 : elements;
    for (size_t i = 0; i < sizes.size() && elements > 0 && elements <= budget; ++i) {
      elements = elements > budget / sizes[i] ? budget + 1 : elements * sizes[i];
    }
    if (elements > budget) {
      return invalid_argument("the module's parameters hold more than " +
                              std::to_string(limits_.max_elements) + " values");
    }
    // Contiguous as torch defines it: row-major strides, ignoring dimensions of size 1.
    uint64_t expected_stride = 1;
    for (size_t i = sizes.size(); i-- > 0 && elements > 0;) {
      if (sizes[i] == 1) continue;
      if (strides[i] != expected_stride) {
        return invalid_argument(parameter + " is not contiguous (its strides are not row-major)");
      }
      expected_stride *= sizes[i];
    }
    auto storage = storage_bytes(name, pickle_[id[2]].text, pickle_[id[4]].integer);
    if (!storage.ok()) return storage.status();
    const uint64_t storage_elements = storage->size() / sizeof(float);
    const uint64_t first = static_cast<uint64_t>(offset.integer);
    if (first > storage_elements || elements > storage_elements - first) {
      return invalid_argument(parameter + " views elements [" + std::to_string(first) + ", " +
                              std::to_string(first + elements) + ") of a storage of " +
                              std::to_string(storage_elements));
    }
    found_.push_back({TensorSpec{name, std::move(sizes)},
                      storage->substr(first * sizeof(float), elements * sizeof(float))});
    element_count_ += elements;
    return ok_status();
  }

  // The bytes of storage `key`, which must hold exactly `elements` float32 values.
  Result<std::string_view> storage_bytes(const std::string& parameter, std::string_view key,
                                         int64_t elements) {
    const std::string file = root_ + "/data/" + std::string(key);
    const ZipEntry* entry = archive_.find(file);
    if (entry == nullptr) {
      return invalid_argument("parameter " + quoted(parameter) + " has no storage entry " + file);
    }
    auto bytes = archive_.read(*entry, limits_.max_bytes);
    if (!bytes.ok()) return bytes.status();
    if (bytes->size() % sizeof(float) != 0 ||
        bytes->size() / sizeof(float) != static_cast<uint64_t>(elements)) {
      return invalid_argument("storage entry " + file + " holds " + std::to_string(bytes->size()) +
                              " bytes, not the " + std::to_string(elements) +
                              " float32 values of its id");
    }
    return bytes;
  }

  ZipArchive& archive_;
  const Unpickler& pickle_;
  const std::string root_;
  const TorchScriptLimits& limits_;
  std::map<std::string, ClassDeclaration> declarations_;
  std::set<std::string> code_files_;
  uint64_t code_bytes_ = 0;
  std::set<ValueId> visited_;
  std::vector<FoundParameter> found_;
  uint64_t element_count_ = 0;
};

Status not_torchscript(const std::string& why) {
  return invalid_argument("not a TorchScript archive: " + why);
}

}  // namespace

Result<ModelBlob> read_torchscript_parameters(std::string_view archive,
                                              const TorchScriptLimits& limits) {
  if (archive.size() > limits.max_bytes) {
    return too_large("TorchScript archive of " + std::to_string(archive.size()) +
                     " bytes exceeds the limit of " + std::to_string(limits.max_bytes));
  }
  ZipArchive zip(limits.max_bytes);
  FEDCASE_RETURN_IF_ERROR(zip.open(archive));
  if (zip.entries().empty()) return not_torchscript("the zip archive is empty");
  // Like libtorch, take the root folder from the first entry.
  const std::string_view first = zip.entries().front().name;
  const size_t slash = first.find('/');
  if (slash == std::string_view::npos || slash == 0) {
    return not_torchscript("entry " + quoted(first) + " lies in no folder");
  }
  const std::string root(first.substr(0, slash));
  const ZipEntry* data_pkl = zip.find(root + "/data.pkl");
  if (data_pkl == nullptr) return not_torchscript("no " + root + "/data.pkl");
  const std::string code_folder = root + "/code/";
  bool has_code = false;
  for (const ZipEntry& entry : zip.entries()) {
    has_code = has_code || entry.name.substr(0, code_folder.size()) == code_folder;
  }
  if (!has_code) {
    return not_torchscript("no " + code_folder + " (a torch.save file is not TorchScript)");
  }
  auto pickle = zip.read(*data_pkl, limits.max_pickle_bytes);
  if (!pickle.ok()) return pickle.status();
  Unpickler unpickler(*pickle, std::string(data_pkl->name));
  auto root_module = unpickler.run();
  if (!root_module.ok()) return root_module.status();
  ParameterFinder finder(zip, unpickler, root, limits);
  FEDCASE_RETURN_IF_ERROR(finder.find_in_root(*root_module));
  if (finder.found().empty()) return invalid_argument("the module has no parameters");

  ModelBlob blob;
  blob.data.resize(finder.element_count());
  float* out = blob.data.data();
  for (const FoundParameter& parameter : finder.found()) {
    const size_t count = parameter.elements.size() / sizeof(float);
    if (count > 0) std::memcpy(out, parameter.elements.data(), parameter.elements.size());
    for (size_t i = 0; i < count; ++i) {
      if (!std::isfinite(out[i])) {
        return unprocessable("parameter " + quoted(parameter.spec.name) +
                             " holds NaN or infinity (element " + std::to_string(i) + ")");
      }
    }
    out += count;
    blob.layout.tensors.push_back(parameter.spec);
  }
  return blob;
}

}  // namespace fedcase
