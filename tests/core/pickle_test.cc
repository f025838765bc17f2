// The pickle writer and reader: exact encodings, round trips of every type, pickles Python writes
// with protocols 0-5, Python reading ours, and malformed input (always Error(kFormat), never a
// crash or an absurd allocation).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>

#include "core/error.h"
#include "tests/support/expect_error.h"
#include "core/pickle.h"

namespace tandem::pickle {
namespace {

using namespace std::string_literals;

using tandem::testing::expect_error;

bool have_python() {
  static const bool found = std::system("python3 -c pass >/dev/null 2>&1") == 0;
  return found;
}

// stdout of a shell command, bytes and all.
std::string run_capture(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string out;
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  EXPECT_EQ(pclose(pipe), 0) << command;
  return out;
}

// Python's pickle of each (expression, protocol), from one python3 run (it is slow to start).
// The expressions go into a shell '...', so they hold no single quotes.
std::vector<std::string> python_pickles(const std::vector<std::pair<std::string, int>>& requests) {
  std::string pairs;
  for (const auto& [expression, protocol] : requests)
    pairs += "(" + expression + ", " + std::to_string(protocol) + "), ";
  const std::string out = run_capture(
      "python3 -c 'import pickle,sys; w = sys.stdout.buffer.write; [w(len(b).to_bytes(8, \"little\") + b) "
      "for b in (pickle.dumps(o, protocol=p) for o, p in [" + pairs + "])]'");
  std::vector<std::string> pickles;
  for (size_t at = 0; at + 8 <= out.size();) {
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<uint8_t>(out[at + static_cast<size_t>(i)]);
    pickles.push_back(out.substr(at + 8, length));
    at += 8 + length;
  }
  EXPECT_EQ(pickles.size(), requests.size());
  pickles.resize(requests.size());
  return pickles;
}

Value round_trip(const Value& value) { return loads(dumps(value)); }

Dict dict(std::initializer_list<std::pair<Value, Value>> items) { return Dict(items); }

TEST(Pickle, WritesPythonsProtocol2Encodings) {
  EXPECT_EQ(dumps(None{}), "\x80\x02N."s);
  EXPECT_EQ(dumps(true), "\x80\x02\x88."s);
  EXPECT_EQ(dumps(false), "\x80\x02\x89."s);
  EXPECT_EQ(dumps(1), "\x80\x02K\x01."s);
  EXPECT_EQ(dumps(256), "\x80\x02M\x00\x01."s);
  EXPECT_EQ(dumps(-1), "\x80\x02J\xff\xff\xff\xff."s);
  EXPECT_EQ(dumps(int64_t{1} << 31), "\x80\x02\x8a\x05\x00\x00\x00\x80\x00."s);  // LONG1, as Python writes it
  EXPECT_EQ(dumps(-(int64_t{1} << 31) - 1), "\x80\x02\x8a\x05\xff\xff\xff\x7f\xff."s);
  EXPECT_EQ(dumps(std::numeric_limits<int64_t>::min()), "\x80\x02\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80."s);
  EXPECT_EQ(dumps(1.5), "\x80\x02G\x3f\xf8\x00\x00\x00\x00\x00\x00."s);
  EXPECT_EQ(dumps("ab"), "\x80\x02X\x02\x00\x00\x00" "ab."s);
  EXPECT_EQ(dumps(Bytes{"ab"}), "\x80\x02\x43\x02\x61\x62."s);
  EXPECT_EQ(dumps(List{}), "\x80\x02]."s);
  EXPECT_EQ(dumps(List{1, 2}), "\x80\x02](K\x01K\x02\x65."s);
  EXPECT_EQ(dumps(Tuple{}), "\x80\x02)."s);
  EXPECT_EQ(dumps(Tuple{{1, 2}}), "\x80\x02K\x01K\x02\x86."s);
  EXPECT_EQ(dumps(Tuple{{1, 2, 3, 4}}), "\x80\x02(K\x01K\x02K\x03K\x04t."s);
  EXPECT_EQ(dumps(dict({{"k", None{}}})), "\x80\x02}(X\x01\x00\x00\x00kNu."s);
}

TEST(Pickle, RoundTripsScalars) {
  for (const Value& v : {Value(None{}), Value(true), Value(false)}) EXPECT_EQ(round_trip(v), v);
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{256}, int64_t{65535}, int64_t{65536}, int64_t{-1},
                    int64_t{-128}, int64_t{-129}, int64_t{INT32_MAX}, int64_t{INT32_MIN}, int64_t{INT32_MAX} + 1,
                    int64_t{INT32_MIN} - 1, int64_t{1} << 40, -(int64_t{1} << 40), int64_t{1} << 55,
                    (int64_t{1} << 55) - 1, -(int64_t{1} << 55), kMin, kMax, kMin + 1, kMax - 1}) {
    EXPECT_EQ(round_trip(i).as_int(), i) << i;
  }
  for (double d : {0.0, 1.5, -2.25, 1e300, 5e-324, std::numeric_limits<double>::infinity(),
                   -std::numeric_limits<double>::infinity()}) {
    EXPECT_EQ(round_trip(d).as_number(), d) << d;
  }
  EXPECT_TRUE(std::signbit(round_trip(-0.0).as_number()));
  EXPECT_TRUE(std::isnan(round_trip(std::numeric_limits<double>::quiet_NaN()).as_number()));
  for (const std::string& s : {""s, "x"s, "héllo ✓ 😀"s, std::string(300, 'z'), "nul\0and\nnewline"s}) {
    EXPECT_EQ(round_trip(s).as_string(), s);
  }
  std::string binary;
  for (int i = 0; i < 300; ++i) binary.push_back(static_cast<char>(i));
  for (const std::string& b : {""s, "\xff\x00"s, binary}) EXPECT_EQ(round_trip(Bytes{b}), Value(Bytes{b}));
}

TEST(Pickle, RoundTripsNestedContainers) {
  const Value nested = dict({
      {"list", List{1, "two", List{3.0, List{None{}, List{}}}}},
      {"tuples", List{Tuple{}, Tuple{{1}}, Tuple{{1, 2}}, Tuple{{1, 2, 3}}, Tuple{{1, 2, 3, 4, 5}}}},
      {"dict", dict({{1, "int key"}, {Tuple{{"a", 2}}, "tuple key"}, {None{}, dict({})}, {true, false}})},
      {"big", List(2500, Value(int64_t{1} << 40))},
  });
  EXPECT_EQ(round_trip(nested), nested);
}

TEST(Pickle, TypedAccessorsNameBothTypes) {
  const Value v = dict({{"a", 1}, {"t", Tuple{{1, 2}}}});
  EXPECT_EQ(v.at("a").as_int(), 1);
  EXPECT_EQ(v.at("a").as_number(), 1.0);
  EXPECT_EQ(v.at("t").as_list().size(), 2u);  // a tuple reads as a list
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_EQ(Value(1).find("a"), nullptr);
  expect_error([&] { v.at("missing"); }, ErrorCode::kFormat, {"missing key 'missing'"});
  expect_error([&] { v.at("a").as_string(); }, ErrorCode::kFormat, {"expected str, got int"});
  expect_error([&] { Value("x").as_int(); }, ErrorCode::kFormat, {"expected int, got str"});
  expect_error([&] { Value(true).as_int(); }, ErrorCode::kFormat, {"expected int, got bool"});
  expect_error([&] { Value(List{}).as_dict(); }, ErrorCode::kFormat, {"expected dict, got list"});
  expect_error([&] { Value(None{}).as_bool(); }, ErrorCode::kFormat, {"expected bool, got None"});
  EXPECT_EQ(Value(Bytes{}).type_name(), "bytes");
  EXPECT_EQ(Value(1.0).type_name(), "float");
}

// Python's pickles of OBJECT, with every protocol, read as EXPECTED.
constexpr const char* kPythonObject =
    R"({"none": None, "t": True, "f": False,)"
    R"( "ints": [0, 1, 255, 256, 65535, 65536, -1, -2**31, 2**31-1, 2**31, -2**31-1, 2**63-1, -2**63],)"
    R"( "floats": [0.0, -2.5, 1e300, float("inf"), float("-inf")],)"
    R"( "text": "h\u00e9llo \u2713 \U0001f600 back\\slash \n \r \x1a \x00 end",)"
    R"( "nested": [[], [1, [2, [3]]]], "tuples": [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)],)"
    R"( "keys": {1: "a", (1, "x"): [None]}, "shared": (lambda a: [a, a, a])([1, "s"]),)"
    R"( "repeated": ["key", "key", "x" * 300], "long": list(range(2500))})";

Value python_object_expected() {
  List long_list;
  for (int i = 0; i < 2500; ++i) long_list.emplace_back(i);
  const Value shared = List{1, "s"};
  return dict({
      {"none", None{}},
      {"t", true},
      {"f", false},
      {"ints", List{0, 1, 255, 256, 65535, 65536, -1, -(int64_t{1} << 31), INT32_MAX, int64_t{1} << 31,
                    -(int64_t{1} << 31) - 1, std::numeric_limits<int64_t>::max(),
                    std::numeric_limits<int64_t>::min()}},
      {"floats", List{0.0, -2.5, 1e300, std::numeric_limits<double>::infinity(),
                      -std::numeric_limits<double>::infinity()}},
      {"text", "h\u00e9llo \u2713 \U0001f600 back\\slash \n \r \x1a \0 end"s},
      {"nested", List{List{}, List{1, List{2, List{3}}}}},
      {"tuples", List{Tuple{}, Tuple{{1}}, Tuple{{1, 2}}, Tuple{{1, 2, 3}}, Tuple{{1, 2, 3, 4}}}},
      {"keys", dict({{1, "a"}, {Tuple{{1, "x"}}, List{None{}}}})},
      {"shared", List{shared, shared, shared}},
      {"repeated", List{"key", "key", std::string(300, 'x')}},
      {"long", long_list},
  });
}

TEST(Pickle, ReadsWhatPythonWritesWithEveryProtocol) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  std::vector<std::pair<std::string, int>> requests;
  for (int protocol = 0; protocol <= 5; ++protocol) {
    // Protocol 0 writes floats as text; NaN comes back as NaN from every protocol.
    requests.emplace_back(std::string("[") + kPythonObject + R"(, float("nan")])", protocol);
  }
  // Bytes need protocol 3 (before that Python goes through a GLOBAL, which we refuse).
  for (int protocol = 3; protocol <= 5; ++protocol)
    requests.emplace_back(R"([b"", b"\x00\xff", b"z" * 300])", protocol);
  const std::vector<std::string> pickles = python_pickles(requests);
  const Value expected = python_object_expected();
  for (int protocol = 0; protocol <= 5; ++protocol) {
    const Value loaded = loads(pickles[static_cast<size_t>(protocol)]);
    EXPECT_EQ(loaded.as_list().at(0), expected) << "protocol " << protocol;
    EXPECT_TRUE(std::isnan(loaded.as_list().at(1).as_number())) << "protocol " << protocol;
  }
  for (size_t i = 6; i < pickles.size(); ++i) {
    EXPECT_EQ(loads(pickles[i]), Value(List{Bytes{""}, Bytes{"\0\xff"s}, Bytes{std::string(300, 'z')}}));
  }
}

TEST(Pickle, RefusesPythonsClassesAndGlobals) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  const std::vector<std::string> pickles = python_pickles({{R"(b"ab")", 2},
                                                           {"{1, 2}", 4},
                                                           {"frozenset()", 4},
                                                           {R"(__import__("collections").OrderedDict())", 4}});
  expect_error([&] { loads(pickles[0]); }, ErrorCode::kFormat, {"unsupported pickle opcode 0x63 (GLOBAL) at byte 2"});
  expect_error([&] { loads(pickles[1]); }, ErrorCode::kFormat, {"unsupported pickle opcode 0x8f (EMPTY_SET)"});
  expect_error([&] { loads(pickles[2]); }, ErrorCode::kFormat, {"unsupported pickle opcode"});
  expect_error([&] { loads(pickles[3]); }, ErrorCode::kFormat, {"(STACK_GLOBAL)"});
}

TEST(Pickle, PythonReadsOurPickles) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  const auto path = std::filesystem::temp_directory_path() / ("tandem_pickle_test_" + std::to_string(getpid()));
  {
    std::ofstream out(path, std::ios::binary);
    // Bytes use protocol 3's opcodes, which Python reads under PROTO 2 as well.
    const std::string bytes = dumps(List{python_object_expected(), Bytes{"\0\xff"s}, Bytes{std::string(300, 'b')}});
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const std::string check = std::string("python3 -c 'import pickle,sys; v = pickle.load(open(sys.argv[1], \"rb\"));") +
                            " sys.exit(0 if v == [" + kPythonObject + R"(, b"\x00\xff", b"b" * 300] else 1)' )" +
                            path.string();
  EXPECT_EQ(std::system(check.c_str()), 0);
  std::filesystem::remove(path);
}

// A pickle that uses memo, DUP, POP, POP_MARK and the text opcodes, written by hand.
TEST(Pickle, ReadsStackAndMemoOpcodes) {
  EXPECT_EQ(loads("\x80\x02K\x01\x32\x86."s), Value(Tuple{{1, 1}}));                   // DUP
  EXPECT_EQ(loads("K\x01K\x02\x30."s), Value(1));                                       // POP
  EXPECT_EQ(loads("K\x01(K\x02K\x03\x31."s), Value(1));                                 // POP_MARK
  EXPECT_EQ(loads("K\x01(\x30."s), Value(1));                                           // POP of an empty mark
  EXPECT_EQ(loads("X\x01\x00\x00\x00\x61r\x07\x00\x00\x00j\x07\x00\x00\x00\x86."s),     // LONG_BINPUT / GET
            Value(Tuple{{"a", "a"}}));
  EXPECT_EQ(loads("I7\np12\n0g12\n."s), Value(7));                                      // PUT / GET
  EXPECT_EQ(loads("I01\n."s), Value(true));                                             // protocol 0 bool
  EXPECT_EQ(loads("L-123L\n."s), Value(-123));
  EXPECT_EQ(loads("F1e-400\n."s), Value(0.0));                                          // underflow, as Python
  EXPECT_EQ(loads("F-1e400\n."s).as_number(), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(loads("V\\u00e9\\U0001f600\\\\u\n."s), Value("é😀\\\\u"));                 // raw-unicode-escape
  EXPECT_EQ(loads("\x8a\x0a\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00."s), Value(1));      // LONG1, 10 bytes
  EXPECT_EQ(loads("\x8b\x02\x00\x00\x00\xff\xff."s), Value(-1));                         // LONG4
  EXPECT_EQ(loads("\x8a\x00."s), Value(0));
  // A later value for an equal key replaces the earlier one, in its place.
  EXPECT_EQ(loads("}(K\x01K\x02K\x03K\x04K\x01K\x05u."s), Value(dict({{1, 5}, {3, 4}})));
  EXPECT_EQ(loads("(K\x01K\x02\x64."s), Value(dict({{1, 2}})));                          // DICT
}

// Integers beyond int64 (PyTorch writes SIZE_MAX for an unknown line) load as BigInt, in the
// shortest two's complement, written back as LONG1; as_int() names the value.
TEST(Pickle, IntegersBeyond64BitsAreBigInts) {
  const std::string size_max("\xff\xff\xff\xff\xff\xff\xff\xff\x00", 9);  // 2^64 - 1
  EXPECT_EQ(loads("\x80\x04\x8a\x09" + size_max + "."), Value(BigInt{size_max}));
  EXPECT_EQ(loads("\x8a\x0b" + size_max + "\x00\x00."s), Value(BigInt{size_max}));      // not the shortest
  EXPECT_EQ(loads("\x8b\x09\x00\x00\x00"s + size_max + "."), Value(BigInt{size_max}));  // LONG4
  EXPECT_EQ(loads("I18446744073709551615\n."s), Value(BigInt{size_max}));               // protocol 0
  EXPECT_EQ(loads("L-18446744073709551615L\n."s),
            Value(BigInt{std::string("\x01\x00\x00\x00\x00\x00\x00\x00\xff", 9)}));
  EXPECT_EQ(loads("I9223372036854775807\n."s), Value(int64_t{9223372036854775807}));  // still an int
  EXPECT_EQ(loads("I-9223372036854775808\n."s), Value(std::numeric_limits<int64_t>::min()));
  EXPECT_EQ(dumps(BigInt{size_max}), "\x80\x02\x8a\x09" + size_max + ".");
  EXPECT_EQ(BigInt{size_max}.decimal(), "18446744073709551615");
  EXPECT_EQ(BigInt{std::string("\x00\x00\x00\x00\x00\x00\x00\x80\xff", 9)}.decimal(), "-9223372036854775808");
  EXPECT_EQ(Value(BigInt{size_max}).type_name(), "int");
  expect_error([&] { loads("\x8a\x09" + size_max + ".").as_int(); }, ErrorCode::kFormat,
               {"integer 18446744073709551615 does not fit in 64 bits"});
  // As a dict key, memoized and fetched again, and through GraphReader (a shared list).
  EXPECT_EQ(loads("}(\x8a\x09" + size_max + "q\x00K\x01u."s), Value(dict({{BigInt{size_max}, 1}})));
  EXPECT_EQ(loads("(\x8a\x09" + size_max + "q\x00h\x00l."s), Value(List{BigInt{size_max}, BigInt{size_max}}));
  EXPECT_EQ(loads("](\x8a\x09" + size_max + "eq\x00h\x00\x86."s),
            Value(Tuple{{List{BigInt{size_max}}, List{BigInt{size_max}}}}));
}

// LoadOptions::skip_keys: the entry is left out, its value never built, whichever reader reads it,
// and its insides may hold anything the reader reads.
TEST(Pickle, SkippedKeysAreLeftOut) {
  LoadOptions options{.skip_keys = {"frames"}};
  const std::string size_max("\xff\xff\xff\xff\xff\xff\xff\xff\x00", 9);
  const Value frame = dict({{"filename", "a.py"}, {"line", BigInt{size_max}}, {"name", "f"}});
  const Value entry = dict({{"action", "alloc"}, {"frames", List{frame, frame}}, {"size", 5}});
  const Value expected_entry = dict({{"action", "alloc"}, {"size", 5}});
  EXPECT_EQ(loads(dumps(List{entry, entry}), options), Value(List{expected_entry, expected_entry}));
  EXPECT_EQ(loads(dumps(List{entry}), LoadOptions{}), Value(List{entry}));
  // Python's pickler shares the frame dicts (memo GETs), and protocol 0 fills dicts and lists one
  // SETITEM and APPEND at a time: the same answer. The last item is a frame fetched from the memo
  // outside any skipped value (DirectReader gives up; GraphReader answers).
  if (have_python()) {
    const std::string objects =
        R"((lambda f: [{"action": "alloc", "frames": [f, f], "size": 5}, {"frames": [f], "size": 6}, )"
        R"({"frames": f, "size": 7}, {"size": 8, "frames": []}, f])({"filename": "a.py", "line": 2**64 - 1, )"
        R"("name": "f"}))";
    const Value expected = List{expected_entry, dict({{"size", 6}}), dict({{"size", 7}}), dict({{"size", 8}}), frame};
    for (const std::string& pickle : python_pickles({{objects, 4}, {objects, 2}, {objects, 0}})) {
      EXPECT_EQ(loads(pickle, options), expected);
    }
  }
  // A key that is also a list or tuple item is not skipped there.
  EXPECT_EQ(loads(dumps(List{"frames", List{1}}), options), Value(List{"frames", List{1}}));
  EXPECT_EQ(loads(dumps(Tuple{{dict({}), "frames", List{1}}}), options), Value(Tuple{{dict({}), "frames", List{1}}}));
}

// Python's memo semantics: GET pushes the memoized object itself, so a list that grows after it
// went into a container (or into two) is seen there as it ended up. Checked against Python 3.11.
TEST(Pickle, MemoSharesTheObjectAsItEndsUp) {
  // d = {}; l = []; d["a"] = l; then GET l, APPEND 7, POP
  EXPECT_EQ(loads("}X\x01\x00\x00\x00" "a]q\x00sh\x00K\x07\x61\x30."s), Value(dict({{"a", List{7}}})));
  // [l, l], then l.append(1)
  EXPECT_EQ(loads("](]q\x00h\x00\x65h\x00K\x01\x61\x30."s), Value(List{List{1}, List{1}}));
  // A tuple used twice is memoized and fetched again, as Python's pickler writes t = ("x", 1); [t, t, {"k": t}].
  const Value tuple = Tuple{{"x", 1}};
  EXPECT_EQ(loads("\x80\x02]q\x00(X\x01\x00\x00\x00xq\x01K\x01\x86q\x02h\x02}q\x03X\x01\x00\x00\x00kq\x04h\x02se."s),
            Value(List{tuple, tuple, dict({{"k", tuple}})}));
  // PyTorch's pickler memoizes a list or dict used twice once it is complete (a dump's stack
  // frames): frame = {"name": "f"}; frames = [frame]; [frames, frames, frame].
  const Value frame = dict({{"name", "f"}});
  EXPECT_EQ(loads("\x80\x02](](}(X\x04\x00\x00\x00nameX\x01\x00\x00\x00" "fuq\x00\x65q\x01h\x01h\x00\x65."s),
            Value(List{List{frame}, List{frame}, frame}));
  // Every scalar type, memoized and fetched again.
  EXPECT_EQ(loads("(Nq\x00\x88q\x01K\x05q\x02G\x3f\xf8\x00\x00\x00\x00\x00\x00q\x03\x43\x02" "abq\x04"
                  "h\x00h\x01h\x02h\x03h\x04l."s),
            Value(List{None{}, true, 5, 1.5, Bytes{"ab"}, None{}, true, 5, 1.5, Bytes{"ab"}}));
  // A key fetched from the memo, and an equal tuple key, replace the earlier value in its place.
  EXPECT_EQ(loads("}(X\x01\x00\x00\x00kq\x00K\x01h\x00K\x02u."s), Value(dict({{"k", 2}})));
  EXPECT_EQ(loads("}((K\x01K\x02tK\x03(K\x01K\x02tK\x04u."s), Value(dict({{Tuple{{1, 2}}, 4}})));
}

// Protocol 0 and 1 fill a dict one SETITEM per key, protocol 2 in batches of 1000 SETITEMS.
TEST(Pickle, ReadsLargeDictsFilledPieceByPiece) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  Dict expected;
  for (int i = 0; i < 3000; ++i) expected.emplace_back(std::to_string(i), i);
  const std::vector<std::string> pickles =
      python_pickles({{"{str(i): i for i in range(3000)}", 0}, {"{str(i): i for i in range(3000)}", 1},
                      {"{str(i): i for i in range(3000)}", 2}});
  for (const std::string& pickle : pickles) EXPECT_EQ(loads(pickle), Value(expected));
}

TEST(Pickle, MalformedInputNamesTheProblemAndByte) {
  const auto bad = [](const std::string& bytes, std::initializer_list<const char*> fragments) {
    expect_error([&] { loads(bytes); }, ErrorCode::kFormat, fragments);
  };
  bad("", {"truncated pickle", "byte 0"});
  bad("\x80\x02N"s, {"truncated pickle (no STOP) at byte 3"});
  bad("\x80\x02\x63os\nsystem\n."s, {"unsupported pickle opcode 0x63 (GLOBAL) at byte 2"});
  bad("\x80\x06N."s, {"unsupported pickle protocol 6"});
  bad("\xffN."s, {"unsupported pickle opcode 0xff (unknown) at byte 0"});
  bad("NR."s, {"(REDUCE) at byte 1"});
  bad("Na."s, {"stack underflow in APPEND at byte 1"});
  bad("}N."s, {"STOP with 2 values on the stack"});
  bad("(N."s, {"STOP inside an unclosed MARK"});
  bad("Ne."s, {"APPENDS without a MARK"});
  bad("(Ne."s, {"stack underflow in APPENDS"});
  bad("N(Ne."s, {"APPENDS to a scalar"});
  bad("}(N\x75."s, {"SETITEMS with an odd number of items"});
  bad("K\x01K\x02\x61."s, {"APPEND to a scalar"});
  bad("}]K\x01s."s, {"unhashable pickle dict key of type list at byte 4"});
  bad("}]\x85K\x01s."s, {"unhashable pickle dict key of type list"});  // a tuple holding a list
  bad("h\x05."s, {"memo key 5 missing"});
  bad("X\xff\xff\xff\xff"s, {"truncated pickle: BINUNICODE needs 4294967295 bytes, 0 left at byte 0"});
  bad("\x8d\xff\xff\xff\xff\xff\xff\xff\xff"s, {"truncated pickle: BINUNICODE8"});
  bad("\x8b\xff\xff\xff\x7f"s, {"truncated pickle: LONG4"});
  bad("\x8b\xff\xff\xff\xff"s, {"negative length"});
  bad("\x95\xff\xff\xff\xff\xff\xff\xff\xffN."s, {"FRAME of"});
  bad("I12x\n."s, {"bad pickle INT argument '12x'"});
  bad("Fnope\n."s, {"bad pickle FLOAT argument"});
  bad("I12"s, {"INT has no newline"});
  bad("V\\u12\n."s, {"truncated \\u escape"});
  bad("V\\U00110000\n."s, {"out of range"});
  bad("Np-1\n"s, {"negative pickle memo key -1"});
}

TEST(Pickle, DepthIsLimitedAndSelfReferencesRejected) {
  const auto nested = [](int depth) { return std::string(depth, ']') + std::string(depth - 1, 'a') + "."; };
  EXPECT_NO_THROW(loads(nested(1000)));
  expect_error([&] { loads(nested(1001)); }, ErrorCode::kFormat, {"deeper than 1000"});
  // Far deeper nesting: no recursion while reading, one clear error at the end.
  expect_error([&] { loads(nested(200'000)); }, ErrorCode::kFormat, {"deeper than 1000"});
  expect_error([] { loads("]\x94h\x00\x61."s); }, ErrorCode::kFormat, {"contains itself"});  // l = []; l.append(l)
}

TEST(Pickle, SharedReferencesCannotExplodeMemory) {
  // t = (); t = (t, t) sixty times: 2^60 leaves from 120 bytes.
  std::string bomb = ")";
  for (int i = 0; i < 60; ++i) bomb += "2\x86";
  bomb += ".";
  expect_error([&] { loads(bomb); }, ErrorCode::kFormat, {"expands to more than"});
  // A few doublings are fine, and shared children are copied.
  std::string small = ")";
  for (int i = 0; i < 4; ++i) small += "2\x86";
  EXPECT_EQ(loads(small + ".").as_list().size(), 2u);
}

// Small, but with every type and opcode family the writer uses.
Value sample() {
  return dict({{"s", "héllo"},
               {"i", List{0, 300, 70000, -5, int64_t{1} << 40}},
               {"f", 2.5},
               {"t", Tuple{{true, false, None{}, Tuple{{1, 2, 3, 4}}}}},
               {"b", Bytes{"\0\1"s}},
               {Tuple{{1, "k"}}, dict({})}});
}

TEST(Pickle, EveryTruncationIsAFormatError) {
  const std::string whole = dumps(sample());
  for (size_t length = 0; length < whole.size(); ++length) {
    try {
      loads(std::string_view(whole).substr(0, length));
      ADD_FAILURE() << "a pickle cut at " << length << " loaded";
    } catch (const Error& e) {
      ASSERT_EQ(e.code(), ErrorCode::kFormat) << e.what();
      ASSERT_NE(std::string(e.what()).find("at byte"), std::string::npos) << e.what();
    }
  }
}

// Sharing a list or dict (here a DUP of an empty list, popped at once) sends the whole pickle to the
// reader that handles it; the value must not depend on which reader read it.
TEST(Pickle, SharedContainersDoNotChangeTheValue) {
  const auto with_shared_list = [](const std::string& pickle) {
    const size_t after_proto = pickle.starts_with('\x80') ? 2 : 0;
    return pickle.substr(0, after_proto) + "]\x32\x30\x30" + pickle.substr(after_proto);
  };
  std::vector<std::string> pickles = {dumps(sample()), dumps(python_object_expected())};
  if (have_python()) {
    std::vector<std::pair<std::string, int>> requests;
    for (int protocol = 0; protocol <= 5; ++protocol) requests.emplace_back(kPythonObject, protocol);
    for (const std::string& pickle : python_pickles(requests)) pickles.push_back(pickle);
  }
  for (const std::string& pickle : pickles) {
    // Bytes, not Values, are compared: a NaN float is not equal to itself.
    EXPECT_EQ(dumps(loads(with_shared_list(pickle))), dumps(loads(pickle)));
  }
}

// Garbage and mutated pickles: a value or Error(kFormat), nothing else; what loads round-trips.
TEST(Pickle, GarbageIsRejectedOrRoundTrips) {
  std::mt19937 random(12345);
  const std::string valid = dumps(sample());
  const std::string alphabet = "()]}.012NKMJXGehqrjsuatld\x85\x86\x87\x88\x89\x8a\x8b\x8c\x94\x95\x80";
  for (int round = 0; round < 20000; ++round) {
    std::string input;
    if (round % 2 == 0) {
      input = valid;
      for (int flips = 1 + static_cast<int>(random() % 4); flips > 0; --flips) {
        input[random() % input.size()] = static_cast<char>(random());
      }
    } else {
      const size_t length = random() % 64;
      for (size_t i = 0; i < length; ++i) {
        input.push_back(random() % 4 == 0 ? static_cast<char>(random()) : alphabet[random() % alphabet.size()]);
      }
    }
    try {
      const std::string written = dumps(loads(input));
      ASSERT_EQ(dumps(loads(written)), written);
    } catch (const Error& e) {
      ASSERT_EQ(e.code(), ErrorCode::kFormat) << e.what();
    }
  }
}

}  // namespace
}  // namespace tandem::pickle
