package pickle

// Pickle opcodes (CPython Lib/pickle.py names), protocols 0-5.
const (
	opMark           = '('
	opStop           = '.'
	opPop            = '0'
	opPopMark        = '1'
	opDup            = '2'
	opFloat          = 'F'
	opInt            = 'I'
	opBinInt         = 'J'
	opBinInt1        = 'K'
	opLong           = 'L'
	opBinInt2        = 'M'
	opNone           = 'N'
	opPersID         = 'P'
	opBinPersID      = 'Q'
	opReduce         = 'R'
	opString         = 'S'
	opBinString      = 'T'
	opShortBinString = 'U'
	opUnicode        = 'V'
	opBinUnicode     = 'X'
	opAppend         = 'a'
	opBuild          = 'b'
	opGlobal         = 'c'
	opDict           = 'd'
	opEmptyDict      = '}'
	opAppends        = 'e'
	opGet            = 'g'
	opBinGet         = 'h'
	opInst           = 'i'
	opLongBinGet     = 'j'
	opList           = 'l'
	opEmptyList      = ']'
	opObj            = 'o'
	opPut            = 'p'
	opBinPut         = 'q'
	opLongBinPut     = 'r'
	opSetItem        = 's'
	opTuple          = 't'
	opEmptyTuple     = ')'
	opSetItems       = 'u'
	opBinFloat       = 'G'

	// protocol 2
	opProto    = 0x80
	opNewObj   = 0x81
	opExt1     = 0x82
	opExt2     = 0x83
	opExt4     = 0x84
	opTuple1   = 0x85
	opTuple2   = 0x86
	opTuple3   = 0x87
	opNewTrue  = 0x88
	opNewFalse = 0x89
	opLong1    = 0x8a
	opLong4    = 0x8b

	// protocol 3
	opBinBytes      = 'B'
	opShortBinBytes = 'C'

	// protocol 4
	opShortBinUnicode = 0x8c
	opBinUnicode8     = 0x8d
	opBinBytes8       = 0x8e
	opEmptySet        = 0x8f
	opAddItems        = 0x90
	opFrozenSet       = 0x91
	opNewObjEx        = 0x92
	opStackGlobal     = 0x93
	opMemoize         = 0x94
	opFrame           = 0x95

	// protocol 5
	opByteArray8     = 0x96
	opNextBuffer     = 0x97
	opReadOnlyBuffer = 0x98
)

// opName returns the CPython name of an opcode byte, or "" if it is none.
func opName(op byte) string {
	switch op {
	case opMark:
		return "MARK"
	case opStop:
		return "STOP"
	case opPop:
		return "POP"
	case opPopMark:
		return "POP_MARK"
	case opDup:
		return "DUP"
	case opFloat:
		return "FLOAT"
	case opInt:
		return "INT"
	case opBinInt:
		return "BININT"
	case opBinInt1:
		return "BININT1"
	case opLong:
		return "LONG"
	case opBinInt2:
		return "BININT2"
	case opNone:
		return "NONE"
	case opPersID:
		return "PERSID"
	case opBinPersID:
		return "BINPERSID"
	case opReduce:
		return "REDUCE"
	case opString:
		return "STRING"
	case opBinString:
		return "BINSTRING"
	case opShortBinString:
		return "SHORT_BINSTRING"
	case opUnicode:
		return "UNICODE"
	case opBinUnicode:
		return "BINUNICODE"
	case opAppend:
		return "APPEND"
	case opBuild:
		return "BUILD"
	case opGlobal:
		return "GLOBAL"
	case opDict:
		return "DICT"
	case opEmptyDict:
		return "EMPTY_DICT"
	case opAppends:
		return "APPENDS"
	case opGet:
		return "GET"
	case opBinGet:
		return "BINGET"
	case opInst:
		return "INST"
	case opLongBinGet:
		return "LONG_BINGET"
	case opList:
		return "LIST"
	case opEmptyList:
		return "EMPTY_LIST"
	case opObj:
		return "OBJ"
	case opPut:
		return "PUT"
	case opBinPut:
		return "BINPUT"
	case opLongBinPut:
		return "LONG_BINPUT"
	case opSetItem:
		return "SETITEM"
	case opTuple:
		return "TUPLE"
	case opEmptyTuple:
		return "EMPTY_TUPLE"
	case opSetItems:
		return "SETITEMS"
	case opBinFloat:
		return "BINFLOAT"
	case opProto:
		return "PROTO"
	case opNewObj:
		return "NEWOBJ"
	case opExt1:
		return "EXT1"
	case opExt2:
		return "EXT2"
	case opExt4:
		return "EXT4"
	case opTuple1:
		return "TUPLE1"
	case opTuple2:
		return "TUPLE2"
	case opTuple3:
		return "TUPLE3"
	case opNewTrue:
		return "NEWTRUE"
	case opNewFalse:
		return "NEWFALSE"
	case opLong1:
		return "LONG1"
	case opLong4:
		return "LONG4"
	case opBinBytes:
		return "BINBYTES"
	case opShortBinBytes:
		return "SHORT_BINBYTES"
	case opShortBinUnicode:
		return "SHORT_BINUNICODE"
	case opBinUnicode8:
		return "BINUNICODE8"
	case opBinBytes8:
		return "BINBYTES8"
	case opEmptySet:
		return "EMPTY_SET"
	case opAddItems:
		return "ADDITEMS"
	case opFrozenSet:
		return "FROZENSET"
	case opNewObjEx:
		return "NEWOBJ_EX"
	case opStackGlobal:
		return "STACK_GLOBAL"
	case opMemoize:
		return "MEMOIZE"
	case opFrame:
		return "FRAME"
	case opByteArray8:
		return "BYTEARRAY8"
	case opNextBuffer:
		return "NEXT_BUFFER"
	case opReadOnlyBuffer:
		return "READONLY_BUFFER"
	}
	return ""
}
