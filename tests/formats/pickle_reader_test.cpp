// The pickle reader on small pickles of protocol 2, as torch's pickler writes them.

#include "formats/pickle_reader.h"

#include <doctest/doctest.h>

#include <string>

using namespace fedcase;
using namespace fedcase::formats::pickle;

namespace {

// The bytes of a literal, NULs included.
template <size_t N>
std::string bytes(const char (&literal)[N]) {
  return std::string(literal, N - 1);
}

Unpickled run(const std::string& pickle) {
  auto values = unpickle(pickle, "test.pkl");
  REQUIRE_MESSAGE(values.ok(), values.status().to_string());
  return std::move(values).value();
}

void check_refused(const std::string& pickle, const std::string& words) {
  auto values = unpickle(pickle, "test.pkl");
  REQUIRE_FALSE(values.ok());
  INFO(values.status().message());
  CHECK(values.status().code() == Code::kInvalidArgument);
  CHECK(values.status().message().find("test.pkl: ") == 0);
  CHECK(values.status().message().find(words) != std::string::npos);
}

}  // namespace

TEST_CASE("a pickle's values: dicts, strings, integers, globals, shared memo values") {
  // {"a": 5, "b": -1}: EMPTY_DICT, MARK, "a", BININT1 5, "b", LONG1 0xff, SETITEMS, STOP.
  const std::string dict = bytes(
      "\x80\x02}(X\x01\x00\x00\x00"
      "a"
      "K\x05X\x01\x00\x00\x00"
      "b"
      "\x8a\x01\xff"
      "u.");
  const Unpickled d = run(dict);
  const Value& root = d[d.root];
  CHECK(root.kind == Kind::kDict);
  REQUIRE(root.items.size() == 4);
  CHECK(d[root.items[0]].kind == Kind::kString);
  CHECK(d[root.items[0]].text == "a");
  CHECK(d[root.items[0]].text.data() >= dict.data());  // a view of the pickle
  CHECK(d[root.items[1]].integer == 5);
  CHECK(d[root.items[3]].kind == Kind::kInt);
  CHECK(d[root.items[3]].integer == -1);  // sign-extended

  // ("x", "x") with the memo's value: BINPUT 0, BINGET 0, TUPLE2.
  const Unpickled t =
      run(bytes("\x80\x02X\x01\x00\x00\x00"
                "xq\x00h\x00\x86."));
  const Value& pair = t[t.root];
  CHECK(pair.kind == Kind::kTuple);
  REQUIRE(pair.items.size() == 2);
  CHECK(pair.items[0] == pair.items[1]);

  const std::string global =
      "\x80\x02"
      "ctorch\nFloatStorage\n.";  // outlives its values' views
  const Unpickled g = run(global);
  CHECK(g[g.root].kind == Kind::kGlobal);
  CHECK(global_module(g[g.root]) == "torch");
  CHECK(global_name(g[g.root]) == "FloatStorage");
  CHECK(global_dotted(g[g.root]) == "torch.FloatStorage");
  CHECK(std::string(kind_name(Kind::kReduce)) == "call result");
}

TEST_CASE("the pickle reader refuses what torch does not write, naming the offset") {
  check_refused(bytes("\x80\x03N."), "unsupported pickle protocol 3");
  check_refused(bytes("\x80\x02N"), "ends before its STOP");
  check_refused(bytes("\x80\x02\x94."), "unsupported pickle opcode 0x94 (opcode at offset 2)");
  check_refused(bytes("\x80\x02N(a."), "pop from an empty stack");
  check_refused(bytes("\x80\x02h\x07."), "memo key 7 is not defined");
  check_refused(bytes("\x80\x02NNNs."), "expected a dict to add to, found a None");
  check_refused(bytes("\x80\x02X\xff\x00\x00\x00"
                      "ab."),
                "truncated opcode");
}
