package workload

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/memstat/memstat/internal/textfile"
	"github.com/memstat/memstat/pkg/report"
)

// A workload file (.mem) is a line-based script of what a PyTorch program
// does with CUDA memory. See README.md ("Workload files") for the language;
// in short:
//
//	# comment
//	let h = 4096                     integer variables (sizes allowed: 4MiB)
//	alloc w [h, h] bf16              a tensor of a shape and dtype
//	alloc buf 64MiB                  or of a byte size
//	free buf, w                      drop tensors
//	repeat 4 as i ... end            loops; names interpolate: act{i}
//	phase forward ... end            a record_function range and a Python frame
//	stream 1 ... end                 allocate on another stream
//	graph g ... end                  capture a CUDA graph into its own pool
//	graph g2 pool=g ... end          share g's pool (pool=g.pool())
//	pool p ... end                   with torch.cuda.use_mem_pool(MemPool p)
//	release g, p                     g.reset() / del p: give up the pool
//	record_stream x 1                x.record_stream(stream 1)
//	synchronize()                    torch.cuda.synchronize()
//	elapse 5ms                       time the GPU computes (trace clock)
//	empty_cache()                    and the other torch.cuda memory calls
//	print(memory_summary())          prints as PyTorch prints
//
// Assigning to a live name allocates the new tensor first and then frees
// the old one, as `x = torch.empty(...)` does in Python.

// File is a parsed workload file.
type File struct {
	// Path is the file as named by the user; errors and frames use it.
	Path string
	body []stmt
}

// FileError is a problem in a workload file: "train.mem:12: unknown tensor
// "x"".
type FileError struct {
	Path string
	Line int
	Msg  string
}

func (e *FileError) Error() string { return fmt.Sprintf("%s:%d: %s", e.Path, e.Line, e.Msg) }

// Size limits of a workload file: hand-written files are a few KB.
const (
	maxFileBytes = 1 << 20
	maxLineBytes = 4096
)

// ReadFile reads and parses a workload file (a regular file of at most
// 1 MiB).
func ReadFile(path string) (*File, error) {
	src, err := textfile.Read(path, "workload file", maxFileBytes)
	if err != nil {
		return nil, err
	}
	return ParseFile(path, src)
}

// ParseFile parses workload source; path names it in errors and frames.
func ParseFile(path, src string) (*File, error) {
	p := &parser{path: path}
	lines := strings.Split(strings.ReplaceAll(src, "\r\n", "\n"), "\n")
	type open struct {
		block *blockStmt
		kind  string
		line  int
	}
	root := &blockStmt{}
	stack := []open{{block: root}}
	for i, text := range lines {
		p.line = i + 1
		if len(text) > maxLineBytes {
			return nil, p.errorf("line longer than %d bytes", maxLineBytes)
		}
		toks, err := lex(text)
		if err != nil {
			return nil, p.errorf("%v", err)
		}
		if len(toks) == 0 {
			continue
		}
		if len(toks) > maxLineTokens {
			return nil, p.errorf("more than %d tokens on one line", maxLineTokens)
		}
		p.toks, p.pos = toks, 0
		if toks[0].is(tWord, "end") {
			if len(toks) > 1 {
				return nil, p.errorf("unexpected %s after \"end\"", toks[1])
			}
			if len(stack) == 1 {
				return nil, p.errorf("\"end\" without a repeat, phase, stream, graph or pool block to close")
			}
			stack = stack[:len(stack)-1]
			continue
		}
		s, err := p.statement()
		if err != nil {
			return nil, err
		}
		top := stack[len(stack)-1].block
		top.body = append(top.body, s)
		if b, ok := s.(blockOpener); ok {
			if len(stack) > maxBlockDepth {
				return nil, p.errorf("blocks nested more than %d deep", maxBlockDepth)
			}
			stack = append(stack, open{block: b.block(), kind: toks[0].text, line: p.line})
		}
	}
	if len(stack) > 1 {
		o := stack[len(stack)-1]
		return nil, &FileError{Path: path, Line: o.line, Msg: fmt.Sprintf("%q block is never closed (no matching \"end\")", o.kind)}
	}
	return &File{Path: path, body: root.body}, nil
}

// Statements.

type stmt interface{ lineNo() int }

type at struct{ line int }

func (a at) lineNo() int { return a.line }

// blockStmt is a list of statements; repeat, phase and stream embed one.
type blockStmt struct{ body []stmt }

func (b *blockStmt) block() *blockStmt { return b }

type blockOpener interface{ block() *blockStmt }

type letStmt struct {
	at
	name string
	val  expr
}

type allocStmt struct {
	at
	name  name
	size  expr   // a byte size, or
	dims  []expr // a shape
	dtype DType  // with a dtype
}

type freeStmt struct {
	at
	names []name
}

type repeatStmt struct {
	at
	count expr
	ivar  string
	blockStmt
}

type phaseStmt struct {
	at
	name string
	blockStmt
}

type streamStmt struct {
	at
	stream expr
	blockStmt
}

// graphStmt captures a CUDA graph: `graph g ... end`, or `graph g
// pool=h ... end` to share the pool of graph (or MemPool) h.
type graphStmt struct {
	at
	name  string
	share string
	blockStmt
}

// poolStmt is `pool p ... end`: with torch.cuda.use_mem_pool(p), the
// MemPool p made at its first use.
type poolStmt struct {
	at
	name string
	blockStmt
}

// releaseStmt is `release g, p`: a graph's reset() or a MemPool's
// destruction gives up its use of the pool.
type releaseStmt struct {
	at
	names []string
}

// elapseStmt is `elapse 5ms`: the device computes for that long, so the
// trace clock (time_us) moves on. A file says nothing else about time:
// without it, allocator calls are 1 µs apart (TimeModelFile).
type elapseStmt struct {
	at
	us int64
}

// maxElapseUS caps one elapse statement at a day: with the statement
// budget, the clock cannot overflow.
const maxElapseUS = 24 * 3600 * 1e6

type recordStreamStmt struct {
	at
	name   name
	stream expr
}

// callStmt is a torch.cuda call; printStmt prints a string or a call's
// result.
type callStmt struct {
	at
	fn   string
	args []arg
}

type printStmt struct {
	at
	text string    // print("text")
	call *callStmt // print(memory_allocated()) etc.
}

// arg is a call argument: positional (key "") or keyword.
type arg struct {
	key string
	val value
}

// value is an argument value: a string, None, a bool, a float literal or
// an integer expression.
type value struct {
	kind  valueKind
	str   string
	b     bool
	f     float64
	e     expr
	token string // as written, for messages
}

type valueKind uint8

const (
	vNone valueKind = iota
	vString
	vBool
	vFloat
	vInt
)

// name is a tensor name with {expr} interpolations: parts alternate
// between literal text and expressions.
type name struct {
	lit   []string
	exprs []expr // len(lit) == len(exprs)+1
	src   string
}

// Lexer.

type tokKind uint8

const (
	tWord tokKind = iota // identifier, possibly dotted, possibly with {…} parts
	tNumber
	tString
	tPunct
)

type token struct {
	kind tokKind
	text string
}

func (t token) is(k tokKind, text string) bool { return t.kind == k && t.text == text }

func (t token) String() string { return textfile.Quote(t.text) }

func isLetter(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }

func lex(line string) ([]token, error) {
	var toks []token
	for i := 0; i < len(line); {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case c == '#':
			return toks, nil
		case c == '"' || c == '\'':
			j := i + 1
			var b strings.Builder
			for ; j < len(line) && line[j] != c; j++ {
				if line[j] == '\\' && j+1 < len(line) {
					j++
				}
				b.WriteByte(line[j])
			}
			if j >= len(line) {
				return nil, fmt.Errorf("unterminated string")
			}
			toks = append(toks, token{tString, b.String()})
			i = j + 1
		case isDigit(c) || c == '.' && i+1 < len(line) && isDigit(line[i+1]):
			j := i
			for j < len(line) && (isDigit(line[j]) || line[j] == '.' || line[j] == '_' || isLetter(line[j])) {
				j++
			}
			toks = append(toks, token{tNumber, line[i:j]})
			i = j
		case isLetter(c):
			// A word: letters, digits, dots, and {…} interpolations.
			j := i
			for j < len(line) {
				ch := line[j]
				if isLetter(ch) || isDigit(ch) || ch == '.' {
					j++
					continue
				}
				if ch == '{' {
					k := strings.IndexByte(line[j:], '}')
					if k < 0 {
						return nil, fmt.Errorf("unclosed { in name %s", textfile.Quote(line[i:]))
					}
					j += k + 1
					continue
				}
				break
			}
			toks = append(toks, token{tWord, line[i:j]})
			i = j
		default:
			for _, p := range []string{"**", "//", "(", ")", "[", "]", ",", "=", "+", "-", "*", "/", "%"} {
				if strings.HasPrefix(line[i:], p) {
					toks = append(toks, token{tPunct, p})
					i += len(p)
					goto next
				}
			}
			return nil, fmt.Errorf("unexpected character %q", c)
		next:
		}
	}
	return toks, nil
}

// Parser.

type parser struct {
	path string
	line int
	toks []token
	pos  int
	// depth counts the expressions being parsed inside one another
	// (parentheses, unary minus, **), which the evaluator recurses into.
	depth int
}

// Nesting limits: a workload file nests blocks and expressions a few deep;
// these stop a hostile one from overflowing the parser's or the
// evaluator's stack (both recurse once per level).
const (
	maxBlockDepth = 100
	maxExprDepth  = 100
	// maxLineTokens bounds a statement, and with it the depth of the
	// left-leaning tree of a chain like 1+1+...+1.
	maxLineTokens = 1000
)

func (p *parser) errorf(format string, args ...any) error {
	return &FileError{Path: p.path, Line: p.line, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) peek() (token, bool) {
	if p.pos < len(p.toks) {
		return p.toks[p.pos], true
	}
	return token{}, false
}

func (p *parser) next() (token, error) {
	if p.pos < len(p.toks) {
		p.pos++
		return p.toks[p.pos-1], nil
	}
	return token{}, p.errorf("unexpected end of line")
}

func (p *parser) accept(k tokKind, text string) bool {
	if t, ok := p.peek(); ok && t.is(k, text) {
		p.pos++
		return true
	}
	return false
}

func (p *parser) expect(k tokKind, text string) error {
	t, err := p.next()
	if err != nil {
		return p.errorf("expected %q at the end of the line", text)
	}
	if !t.is(k, text) {
		return p.errorf("expected %q, found %s", text, t)
	}
	return nil
}

func (p *parser) done() error {
	if t, ok := p.peek(); ok {
		return p.errorf("unexpected %s", t)
	}
	return nil
}

func (p *parser) ident(what string) (string, error) {
	t, err := p.next()
	if err != nil || t.kind != tWord || strings.ContainsAny(t.text, ".{}") {
		if err != nil {
			return "", p.errorf("expected %s", what)
		}
		return "", p.errorf("expected %s, found %s", what, t)
	}
	return t.text, nil
}

// keywords cannot name variables or tensors.
var keywords = map[string]bool{
	"let": true, "alloc": true, "free": true, "repeat": true, "as": true, "phase": true, "stream": true,
	"end": true, "print": true, "record_stream": true, "None": true, "True": true, "False": true,
	"graph": true, "pool": true, "release": true, "elapse": true,
}

func (p *parser) statement() (stmt, error) {
	head, _ := p.next()
	a := at{p.line}
	var s stmt
	var err error
	switch {
	case head.is(tWord, "let"):
		s, err = p.let(a)
	case head.is(tWord, "alloc"):
		s, err = p.alloc(a)
	case head.is(tWord, "free"):
		s, err = p.free(a)
	case head.is(tWord, "repeat"):
		r := &repeatStmt{at: a}
		if r.count, err = p.expr(); err == nil && p.accept(tWord, "as") {
			r.ivar, err = p.varName()
		}
		s = r
	case head.is(tWord, "phase"):
		ph := &phaseStmt{at: a}
		t, e := p.next()
		switch {
		case e != nil:
			err = p.errorf("expected the phase's name")
		case t.kind == tString || t.kind == tWord && !strings.ContainsAny(t.text, "{}"):
			ph.name = t.text
		default:
			err = p.errorf("expected the phase's name, found %s", t)
		}
		s = ph
	case head.is(tWord, "stream"):
		st := &streamStmt{at: a}
		st.stream, err = p.expr()
		s = st
	case head.is(tWord, "graph"):
		g := &graphStmt{at: a}
		if g.name, err = p.poolName(); err == nil && p.accept(tWord, "pool") {
			if err = p.expect(tPunct, "="); err == nil {
				g.share, err = p.poolName()
			}
		}
		s = g
	case head.is(tWord, "pool"):
		ps := &poolStmt{at: a}
		ps.name, err = p.poolName()
		s = ps
	case head.is(tWord, "release"):
		rs := &releaseStmt{at: a}
		for err == nil {
			var n string
			if n, err = p.poolName(); err == nil {
				rs.names = append(rs.names, n)
			}
			if !p.accept(tPunct, ",") {
				break
			}
		}
		s = rs
	case head.is(tWord, "elapse"):
		es := &elapseStmt{at: a}
		es.us, err = p.duration()
		s = es
	case head.is(tWord, "record_stream"):
		rs := &recordStreamStmt{at: a}
		if rs.name, err = p.tensorName(); err == nil {
			rs.stream, err = p.expr()
		}
		s = rs
	case head.is(tWord, "print"):
		s, err = p.print(a)
	case head.kind == tWord:
		p.pos--
		s, err = p.call()
	default:
		err = p.errorf("a statement cannot start with %s", head)
	}
	if err != nil {
		return nil, err
	}
	if err := p.done(); err != nil {
		return nil, err
	}
	return s, nil
}

// duration reads a duration with its unit (250us, 5ms, 1.5s) in
// microseconds.
func (p *parser) duration() (int64, error) {
	t, err := p.next()
	if err != nil || t.kind != tNumber {
		return 0, p.errorf("elapse: expected a duration such as 250us, 5ms or 1.5s")
	}
	num, scale := t.text, 0.0
	for _, u := range []struct {
		suffix string
		us     float64
	}{{"us", 1}, {"ms", 1e3}, {"s", 1e6}} {
		if strings.HasSuffix(t.text, u.suffix) {
			num, scale = strings.TrimSuffix(t.text, u.suffix), u.us
			break
		}
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(num, "_", ""), 64)
	if scale == 0 || err != nil || f < 0 {
		return 0, p.errorf("elapse: bad duration %s (want e.g. 250us, 5ms, 1.5s)", textfile.Quote(t.text))
	}
	us := f * scale
	if us > maxElapseUS {
		return 0, p.errorf("elapse: %s is more than a day", textfile.Quote(t.text))
	}
	return int64(us), nil
}

// poolName reads the name of a graph or MemPool.
func (p *parser) poolName() (string, error) {
	n, err := p.ident("a graph or pool name")
	if err == nil && keywords[n] {
		return "", p.errorf("%s is a keyword, not a graph or pool name", textfile.Quote(n))
	}
	return n, err
}

func (p *parser) varName() (string, error) {
	n, err := p.ident("a variable name")
	if err == nil && keywords[n] {
		return "", p.errorf("%s is a keyword, not a variable name", textfile.Quote(n))
	}
	return n, err
}

func (p *parser) let(a at) (stmt, error) {
	n, err := p.varName()
	if err != nil {
		return nil, err
	}
	if err := p.expect(tPunct, "="); err != nil {
		return nil, err
	}
	v, err := p.expr()
	return &letStmt{at: a, name: n, val: v}, err
}

func (p *parser) alloc(a at) (stmt, error) {
	n, err := p.tensorName()
	if err != nil {
		return nil, err
	}
	s := &allocStmt{at: a, name: n}
	if _, ok := p.peek(); !ok {
		return nil, p.errorf("alloc %s: missing size (e.g. 4MiB, or [1024, 1024] bf16)", textfile.Cut(n.src))
	}
	if !p.accept(tPunct, "[") {
		s.size, err = p.expr()
		return s, err
	}
	for {
		d, err := p.expr()
		if err != nil {
			return nil, err
		}
		s.dims = append(s.dims, d)
		if p.accept(tPunct, "]") {
			break
		}
		if err := p.expect(tPunct, ","); err != nil {
			return nil, err
		}
	}
	t, err := p.next()
	if err != nil {
		return nil, p.errorf("alloc %s: the shape needs a dtype (e.g. bf16, float32)", textfile.Cut(n.src))
	}
	if s.dtype, err = ParseDType(t.text); err != nil {
		return nil, p.errorf("%v", err)
	}
	return s, nil
}

func (p *parser) free(a at) (stmt, error) {
	s := &freeStmt{at: a}
	for {
		n, err := p.tensorName()
		if err != nil {
			return nil, err
		}
		s.names = append(s.names, n)
		if !p.accept(tPunct, ",") {
			return s, nil
		}
	}
}

// tensorName reads a tensor name, splitting out its {expr} parts.
func (p *parser) tensorName() (name, error) {
	t, err := p.next()
	if err != nil || t.kind != tWord {
		if err != nil {
			return name{}, p.errorf("expected a tensor name")
		}
		return name{}, p.errorf("expected a tensor name, found %s", t)
	}
	if keywords[t.text] {
		return name{}, p.errorf("%s is a keyword, not a tensor name", textfile.Quote(t.text))
	}
	n := name{src: t.text}
	rest := t.text
	for {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			n.lit = append(n.lit, rest)
			return n, nil
		}
		j := strings.IndexByte(rest[i:], '}') + i
		n.lit = append(n.lit, rest[:i])
		toks, err := lex(rest[i+1 : j])
		if err != nil || len(toks) == 0 {
			return name{}, p.errorf("bad {...} in name %s", textfile.Quote(t.text))
		}
		sub := &parser{path: p.path, line: p.line, toks: toks, depth: p.depth}
		e, err := sub.expr()
		if err != nil {
			return name{}, err
		}
		if err := sub.done(); err != nil {
			return name{}, err
		}
		n.exprs = append(n.exprs, e)
		rest = rest[j+1:]
	}
}

// Calls.

// torchPrefixes may precede a torch.cuda function's name.
var torchPrefixes = []string{"torch.cuda.memory.", "torch.cuda.", "cuda."}

func trimTorch(fn string) string {
	for _, pre := range torchPrefixes {
		if s, ok := strings.CutPrefix(fn, pre); ok {
			return s
		}
	}
	return fn
}

// calls are the torch.cuda functions a statement may call, with the
// keywords each accepts (positional arguments map onto them in order).
var calls = map[string][]string{
	"empty_cache":                     nil,
	"synchronize":                     {"device"},
	"reset_peak_memory_stats":         {"device"},
	"reset_max_memory_allocated":      {"device"},
	"reset_accumulated_memory_stats":  {"device"},
	"set_per_process_memory_fraction": {"fraction", "device"},
	"_record_memory_history":          {"enabled", "context", "stacks", "max_entries", "device", "clear_history"},
	"_set_allocator_settings":         {"env"},
}

// queries are the functions whose result print() shows.
var queries = map[string][]string{
	"memory_allocated":     {"device"},
	"memory_reserved":      {"device"},
	"max_memory_allocated": {"device"},
	"max_memory_reserved":  {"device"},
	"memory_stats":         {"device"},
	"memory_summary":       {"device", "abbreviated"},
}

func (p *parser) call() (stmt, error) {
	c, err := p.callExpr(calls, "a statement (let, alloc, free, repeat, phase, stream, end, print, record_stream) or a torch.cuda call")
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (p *parser) print(a at) (stmt, error) {
	if err := p.expect(tPunct, "("); err != nil {
		return nil, err
	}
	s := &printStmt{at: a}
	t, ok := p.peek()
	switch {
	case !ok:
		return nil, p.errorf("unexpected end of line")
	case t.kind == tString:
		p.pos++
		s.text = t.text
	default:
		c, err := p.callExpr(queries, "a string or one of memory_allocated(), memory_reserved(), "+
			"max_memory_allocated(), max_memory_reserved(), memory_stats(), memory_summary()")
		if err != nil {
			return nil, err
		}
		s.call = c
	}
	return s, p.expect(tPunct, ")")
}

// callExpr reads fn(args) where fn is one of table's functions.
func (p *parser) callExpr(table map[string][]string, want string) (*callStmt, error) {
	t, err := p.next()
	if err != nil {
		return nil, p.errorf("expected %s", want)
	}
	fn := trimTorch(t.text)
	keys, known := table[fn]
	if t.kind != tWord || !known {
		return nil, p.errorf("unknown statement %s: expected %s", textfile.Quote(t.text), want)
	}
	if err := p.expect(tPunct, "("); err != nil {
		return nil, err
	}
	c := &callStmt{at: at{p.line}, fn: fn}
	seen := map[string]bool{}
	for !p.accept(tPunct, ")") {
		if len(c.args) > 0 {
			if err := p.expect(tPunct, ","); err != nil {
				return nil, err
			}
		}
		key := ""
		if t, ok := p.peek(); ok && t.kind == tWord && p.pos+1 < len(p.toks) && p.toks[p.pos+1].is(tPunct, "=") {
			key = t.text
			p.pos += 2
		} else if len(c.args) < len(keys) {
			key = keys[len(c.args)]
		} else {
			return nil, p.errorf("%s() takes at most %d positional arguments", fn, len(keys))
		}
		if !slices.Contains(keys, key) {
			return nil, p.errorf("%s() got an unexpected keyword argument %s", fn, textfile.Quote(key))
		}
		if seen[key] {
			return nil, p.errorf("%s() got multiple values for argument %s", fn, textfile.Quote(key))
		}
		seen[key] = true
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		c.args = append(c.args, arg{key: key, val: v})
	}
	return c, nil
}

func (p *parser) value() (value, error) {
	t, ok := p.peek()
	if !ok {
		return value{}, p.errorf("expected a value")
	}
	switch {
	case t.kind == tString:
		p.pos++
		return value{kind: vString, str: t.text, token: textfile.Quote(t.text)}, nil
	case t.is(tWord, "None"):
		p.pos++
		return value{kind: vNone, token: "None"}, nil
	case t.is(tWord, "True"), t.is(tWord, "False"):
		p.pos++
		return value{kind: vBool, b: t.text == "True", token: t.text}, nil
	case t.kind == tNumber && strings.Contains(t.text, ".") && isDigit(t.text[len(t.text)-1]):
		p.pos++
		f, err := strconv.ParseFloat(t.text, 64)
		if err != nil {
			return value{}, p.errorf("bad number %s", textfile.Quote(t.text))
		}
		return value{kind: vFloat, f: f, token: textfile.Cut(t.text)}, nil
	}
	start := p.pos
	e, err := p.expr()
	if err != nil {
		return value{}, err
	}
	var src []string
	for _, t := range p.toks[start:p.pos] {
		src = append(src, t.text)
	}
	return value{kind: vInt, e: e, token: textfile.Cut(strings.Join(src, " "))}, nil
}

// Expressions: integer arithmetic with Python's precedence; numbers may
// carry a size unit (4MiB, 1.5GiB).

type expr interface {
	eval(vars map[string]int64) (int64, error)
}

type numExpr int64

type varExpr string

type negExpr struct{ x expr }

type binExpr struct {
	op   string
	l, r expr
}

func (p *parser) expr() (expr, error) {
	l, err := p.term()
	for err == nil {
		var op string
		switch {
		case p.accept(tPunct, "+"):
			op = "+"
		case p.accept(tPunct, "-"):
			op = "-"
		default:
			return l, nil
		}
		var r expr
		if r, err = p.term(); err == nil {
			l = &binExpr{op, l, r}
		}
	}
	return nil, err
}

func (p *parser) term() (expr, error) {
	l, err := p.unary()
	for err == nil {
		op := ""
		for _, o := range []string{"*", "//", "/", "%"} {
			if p.accept(tPunct, o) {
				op = o
				break
			}
		}
		if op == "" {
			return l, nil
		}
		var r expr
		if r, err = p.unary(); err == nil {
			l = &binExpr{op, l, r}
		}
	}
	return nil, err
}

func (p *parser) unary() (expr, error) {
	if p.depth++; p.depth > maxExprDepth {
		return nil, p.errorf("expression nested more than %d deep", maxExprDepth)
	}
	defer func() { p.depth-- }()
	if p.accept(tPunct, "-") {
		x, err := p.unary()
		return &negExpr{x}, err
	}
	b, err := p.atom()
	if err == nil && p.accept(tPunct, "**") {
		var e expr
		if e, err = p.unary(); err == nil {
			return &binExpr{"**", b, e}, nil
		}
	}
	return b, err
}

func (p *parser) atom() (expr, error) {
	t, err := p.next()
	if err != nil {
		return nil, p.errorf("expected a number, a size or a variable")
	}
	switch {
	case t.kind == tNumber:
		n, err := report.ParseSize(t.text)
		if err != nil {
			return nil, p.errorf("bad number or size %s (want e.g. 4096, 4MiB, 1.5GiB)", textfile.Quote(t.text))
		}
		return numExpr(n), nil
	case t.is(tPunct, "("):
		e, err := p.expr()
		if err != nil {
			return nil, err
		}
		return e, p.expect(tPunct, ")")
	case t.kind == tWord && !strings.ContainsAny(t.text, ".{}") && !keywords[t.text]:
		return varExpr(t.text), nil
	}
	return nil, p.errorf("expected a number, a size or a variable, found %s", t)
}

func (n numExpr) eval(map[string]int64) (int64, error) { return int64(n), nil }

func (v varExpr) eval(vars map[string]int64) (int64, error) {
	if x, ok := vars[string(v)]; ok {
		return x, nil
	}
	return 0, fmt.Errorf("unknown variable %s", textfile.Quote(string(v)))
}

func (n *negExpr) eval(vars map[string]int64) (int64, error) {
	x, err := n.x.eval(vars)
	return -x, err
}

func (b *binExpr) eval(vars map[string]int64) (int64, error) {
	l, err := b.l.eval(vars)
	if err != nil {
		return 0, err
	}
	r, err := b.r.eval(vars)
	if err != nil {
		return 0, err
	}
	const lim = 1 << 62
	over := func(v float64) bool { return v >= lim || v <= -lim }
	switch b.op {
	case "+":
		if over(float64(l) + float64(r)) {
			return 0, fmt.Errorf("integer overflow")
		}
		return l + r, nil
	case "-":
		if over(float64(l) - float64(r)) {
			return 0, fmt.Errorf("integer overflow")
		}
		return l - r, nil
	case "*":
		if over(float64(l) * float64(r)) {
			return 0, fmt.Errorf("integer overflow")
		}
		return l * r, nil
	case "/", "//", "%":
		if r == 0 {
			return 0, fmt.Errorf("division by zero")
		}
		q := floorDiv(l, r)
		if b.op == "%" {
			return l - q*r, nil
		}
		return q, nil
	case "**":
		if r < 0 {
			return 0, fmt.Errorf("negative exponent")
		}
		v := int64(1)
		for range r {
			if over(float64(v) * float64(l)) {
				return 0, fmt.Errorf("integer overflow")
			}
			v *= l
		}
		return v, nil
	}
	return 0, fmt.Errorf("unknown operator %s", b.op)
}

// floorDiv is Python's //.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// frameFile is the file name frames carry: the base name, so recordings
// do not depend on where the file was read from.
func (f *File) frameFile() string { return filepath.Base(f.Path) }
