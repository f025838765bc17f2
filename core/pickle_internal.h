// What the pickle files share (pickle_write.cc writes, pickle_direct_reader.cc and
// pickle_graph_reader.cc read, pickle.cc holds Value and picks the reader): the opcodes, with the
// names every error message uses, and the two readers' entry points. Not a public header: only
// core/pickle*.cc include it.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

#include "core/pickle.h"

namespace tandem::pickle::detail {

// Every opcode Python knows (Lib/pickletools.py), so that a rejection names what it saw.
enum class Op : uint8_t {
  kMark = '(',
  kStop = '.',
  kPop = '0',
  kPopMark = '1',
  kDup = '2',
  kFloat = 'F',
  kInt = 'I',
  kBinInt = 'J',
  kBinInt1 = 'K',
  kLong = 'L',
  kBinInt2 = 'M',
  kNone = 'N',
  kPersId = 'P',
  kBinPersId = 'Q',
  kReduce = 'R',
  kString = 'S',
  kBinString = 'T',
  kShortBinString = 'U',
  kUnicode = 'V',
  kBinUnicode = 'X',
  kAppend = 'a',
  kBuild = 'b',
  kGlobal = 'c',
  kDict = 'd',
  kEmptyDict = '}',
  kAppends = 'e',
  kGet = 'g',
  kBinGet = 'h',
  kInst = 'i',
  kLongBinGet = 'j',
  kList = 'l',
  kEmptyList = ']',
  kObj = 'o',
  kPut = 'p',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kSetItem = 's',
  kTuple = 't',
  kEmptyTuple = ')',
  kSetItems = 'u',
  kBinFloat = 'G',
  kBinBytes = 'B',
  kShortBinBytes = 'C',
  kProto = 0x80,
  kNewObj = 0x81,
  kExt1 = 0x82,
  kExt2 = 0x83,
  kExt4 = 0x84,
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kLong1 = 0x8a,
  kLong4 = 0x8b,
  kShortBinUnicode = 0x8c,
  kBinUnicode8 = 0x8d,
  kBinBytes8 = 0x8e,
  kEmptySet = 0x8f,
  kAddItems = 0x90,
  kFrozenSet = 0x91,
  kNewObjEx = 0x92,
  kStackGlobal = 0x93,
  kMemoize = 0x94,
  kFrame = 0x95,
  kByteArray8 = 0x96,
  kNextBuffer = 0x97,
  kReadonlyBuffer = 0x98,
};

inline const char* opcode_name(uint8_t code) {
  static constexpr std::pair<uint8_t, const char*> kNames[] = {
      {'(', "MARK"},          {'.', "STOP"},         {'0', "POP"},           {'1', "POP_MARK"},
      {'2', "DUP"},           {'F', "FLOAT"},        {'I', "INT"},           {'J', "BININT"},
      {'K', "BININT1"},       {'L', "LONG"},         {'M', "BININT2"},       {'N', "NONE"},
      {'P', "PERSID"},        {'Q', "BINPERSID"},    {'R', "REDUCE"},        {'S', "STRING"},
      {'T', "BINSTRING"},     {'U', "SHORT_BINSTRING"}, {'V', "UNICODE"},    {'X', "BINUNICODE"},
      {'a', "APPEND"},        {'b', "BUILD"},        {'c', "GLOBAL"},        {'d', "DICT"},
      {'}', "EMPTY_DICT"},    {'e', "APPENDS"},      {'g', "GET"},           {'h', "BINGET"},
      {'i', "INST"},          {'j', "LONG_BINGET"},  {'l', "LIST"},          {']', "EMPTY_LIST"},
      {'o', "OBJ"},           {'p', "PUT"},          {'q', "BINPUT"},        {'r', "LONG_BINPUT"},
      {'s', "SETITEM"},       {'t', "TUPLE"},        {')', "EMPTY_TUPLE"},   {'u', "SETITEMS"},
      {'G', "BINFLOAT"},      {'B', "BINBYTES"},     {'C', "SHORT_BINBYTES"}, {0x80, "PROTO"},
      {0x81, "NEWOBJ"},       {0x82, "EXT1"},        {0x83, "EXT2"},         {0x84, "EXT4"},
      {0x85, "TUPLE1"},       {0x86, "TUPLE2"},      {0x87, "TUPLE3"},       {0x88, "NEWTRUE"},
      {0x89, "NEWFALSE"},     {0x8a, "LONG1"},       {0x8b, "LONG4"},        {0x8c, "SHORT_BINUNICODE"},
      {0x8d, "BINUNICODE8"},  {0x8e, "BINBYTES8"},   {0x8f, "EMPTY_SET"},    {0x90, "ADDITEMS"},
      {0x91, "FROZENSET"},    {0x92, "NEWOBJ_EX"},   {0x93, "STACK_GLOBAL"}, {0x94, "MEMOIZE"},
      {0x95, "FRAME"},        {0x96, "BYTEARRAY8"},  {0x97, "NEXT_BUFFER"},  {0x98, "READONLY_BUFFER"},
  };
  for (const auto& [code_of, name_of] : kNames) {
    if (code_of == code) return name_of;
  }
  return "unknown";
}

// The two readers (pickle.cc's loads() says why there are two and which answers when).
//
// The value, or nullopt when GraphReader must read the input (pickle_direct_reader.cc lists when
// DirectReader gives up). One DirectReader per thread, kept between calls.
std::optional<Value> read_direct(std::string_view bytes, const LoadOptions& options);
// Any pickle of the plain types; throws Error(kFormat) naming the byte offset of what was wrong.
Value read_graph(std::string_view bytes, const LoadOptions& options);

}  // namespace tandem::pickle::detail
