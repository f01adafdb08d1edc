#include "k8s/dra/cel.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <set>
#include <vector>

#include "common/status.h"
#include "common/strings.h"

namespace tessera::k8s::dra {
namespace {

__extension__ typedef unsigned __int128 u128;

constexpr std::string_view kSupported =
    "tessera's CEL evaluator supports comparisons of attributes and capacities, &&, ||, !, in, "
    "?:, integer arithmetic, has(), cel.bind(), size(), startsWith/endsWith/contains, "
    "quantity() and semver() with compareTo/isGreaterThan/isLessThan";

// --- values ------------------------------------------------------------------------------------

struct Semver {
  uint64_t major = 0, minor = 0, patch = 0;
  std::vector<std::string> pre;  // pre-release identifiers
};

// Semantic versioning 2.0.0, strictly (as github.com/blang/semver's Parse): no leading zeros,
// pre-release identifiers of [0-9A-Za-z-], build metadata ignored for comparison.
std::optional<Semver> ParseSemver(std::string_view text) {
  Semver v;
  size_t plus = text.find('+');
  if (plus != std::string_view::npos) {
    std::string_view build = text.substr(plus + 1);
    if (build.empty()) return std::nullopt;
    text = text.substr(0, plus);
  }
  std::string_view pre;
  size_t dash = text.find('-');
  if (dash != std::string_view::npos) {
    pre = text.substr(dash + 1);
    text = text.substr(0, dash);
    if (pre.empty()) return std::nullopt;
  }
  auto number = [](std::string_view s, uint64_t* out) {
    if (s.empty() || s.size() > 19 || (s.size() > 1 && s[0] == '0')) return false;
    uint64_t n = 0;
    for (char c : s) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return false;
      n = n * 10 + static_cast<uint64_t>(c - '0');
    }
    *out = n;
    return true;
  };
  uint64_t* parts[] = {&v.major, &v.minor, &v.patch};
  for (int i = 0; i < 3; ++i) {
    size_t dot = i < 2 ? text.find('.') : text.size();
    if (dot == std::string_view::npos) return std::nullopt;
    if (!number(text.substr(0, dot), parts[i])) return std::nullopt;
    text = i < 2 ? text.substr(dot + 1) : std::string_view();
  }
  while (!pre.empty()) {
    size_t dot = pre.find('.');
    std::string_view id = pre.substr(0, dot);
    if (id.empty()) return std::nullopt;
    bool numeric = std::all_of(id.begin(), id.end(),
                               [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (numeric && id.size() > 1 && id[0] == '0') return std::nullopt;
    for (char c : id) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return std::nullopt;
    }
    v.pre.emplace_back(id);
    pre = dot == std::string_view::npos ? std::string_view() : pre.substr(dot + 1);
    if (dot != std::string_view::npos && pre.empty()) return std::nullopt;
  }
  return v;
}

int CompareSemver(const Semver& a, const Semver& b) {
  for (auto [x, y] :
       {std::pair{a.major, b.major}, std::pair{a.minor, b.minor}, std::pair{a.patch, b.patch}}) {
    if (x != y) return x < y ? -1 : 1;
  }
  if (a.pre.empty() != b.pre.empty()) return a.pre.empty() ? 1 : -1;
  for (size_t i = 0; i < std::min(a.pre.size(), b.pre.size()); ++i) {
    const std::string &x = a.pre[i], &y = b.pre[i];
    auto numeric = [](const std::string& s) {
      return std::all_of(s.begin(), s.end(),
                         [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    };
    const bool nx = numeric(x), ny = numeric(y);
    if (nx && ny) {
      if (x.size() != y.size()) return x.size() < y.size() ? -1 : 1;
      if (x != y) return x < y ? -1 : 1;
    } else if (nx != ny) {
      return nx ? -1 : 1;
    } else if (x != y) {
      return x < y ? -1 : 1;
    }
  }
  if (a.pre.size() != b.pre.size()) return a.pre.size() < b.pre.size() ? -1 : 1;
  return 0;
}

struct Value {
  enum class Type : uint8_t {
    kError,
    kNull,
    kBool,
    kInt,
    kString,
    kList,
    kQuantity,  // i: milli-units
    kSemver,
    kDevice,
    kAttributeDomains,  // device.attributes
    kAttributes,        // device.attributes["domain"]
    kCapacityDomains,   // device.capacity
    kCapacities,        // device.capacity["domain"]
  };
  Type type = Type::kNull;
  bool b = false;
  int64_t i = 0;
  std::string s;  // string, or an error's message
  std::shared_ptr<const std::vector<Value>> list;
  std::shared_ptr<const Semver> ver;
  const std::map<std::string, AttributeValue>* attributes = nullptr;
  const std::map<std::string, DeviceCapacity>* capacities = nullptr;

  static Value Error(std::string message) {
    Value v;
    v.type = Type::kError;
    v.s = std::move(message);
    return v;
  }
  static Value Bool(bool b) {
    Value v;
    v.type = Type::kBool;
    v.b = b;
    return v;
  }
  static Value Int(int64_t i) {
    Value v;
    v.type = Type::kInt;
    v.i = i;
    return v;
  }
  static Value String(std::string s) {
    Value v;
    v.type = Type::kString;
    v.s = std::move(s);
    return v;
  }
  static Value Quantity(int64_t milli) {
    Value v;
    v.type = Type::kQuantity;
    v.i = milli;
    return v;
  }
  static Value Version(Semver s) {
    Value v;
    v.type = Type::kSemver;
    v.ver = std::make_shared<const Semver>(std::move(s));
    return v;
  }
  bool error() const { return type == Type::kError; }
};

std::string_view TypeName(const Value& v) {
  switch (v.type) {
    case Value::Type::kError:
      return "error";
    case Value::Type::kNull:
      return "null";
    case Value::Type::kBool:
      return "bool";
    case Value::Type::kInt:
      return "int";
    case Value::Type::kString:
      return "string";
    case Value::Type::kList:
      return "list";
    case Value::Type::kQuantity:
      return "Quantity";
    case Value::Type::kSemver:
      return "Semver";
    case Value::Type::kDevice:
      return "kubernetes.DRADevice";
    case Value::Type::kAttributeDomains:
    case Value::Type::kAttributes:
    case Value::Type::kCapacityDomains:
    case Value::Type::kCapacities:
      return "map";
  }
  return "?";
}

Value NoOverload(std::string_view op, const Value& a, const Value& b) {
  return Value::Error(StrCat("no such overload: ", TypeName(a), " ", op, " ", TypeName(b)));
}

Value FromAttribute(const AttributeValue& a) {
  switch (a.kind) {
    case AttributeValue::Kind::kInt:
      return Value::Int(a.i);
    case AttributeValue::Kind::kBool:
      return Value::Bool(a.b);
    case AttributeValue::Kind::kString:
      return Value::String(a.s);
    case AttributeValue::Kind::kVersion: {
      std::optional<Semver> v = ParseSemver(a.s);
      if (!v) return Value::Error(StrCat("parse semantic version: \"", a.s, "\""));
      return Value::Version(*v);
    }
    case AttributeValue::Kind::kList:
      return Value::Error("list-typed attributes are not supported by tessera's CEL evaluator");
  }
  return Value::Error("unknown attribute kind");
}

// CEL equality: false between different types (heterogeneous equality), errors propagate.
Value Equal(const Value& a, const Value& b) {
  if (a.error()) return a;
  if (b.error()) return b;
  if (a.type != b.type) return Value::Bool(false);
  switch (a.type) {
    case Value::Type::kNull:
      return Value::Bool(true);
    case Value::Type::kBool:
      return Value::Bool(a.b == b.b);
    case Value::Type::kInt:
    case Value::Type::kQuantity:
      return Value::Bool(a.i == b.i);
    case Value::Type::kString:
      return Value::Bool(a.s == b.s);
    case Value::Type::kSemver:
      return Value::Bool(CompareSemver(*a.ver, *b.ver) == 0);
    case Value::Type::kList: {
      if (a.list->size() != b.list->size()) return Value::Bool(false);
      for (size_t k = 0; k < a.list->size(); ++k) {
        Value e = Equal((*a.list)[k], (*b.list)[k]);
        if (e.error() || !e.b) return e;
      }
      return Value::Bool(true);
    }
    default:
      return NoOverload("==", a, b);
  }
}

// --- lexer -------------------------------------------------------------------------------------

struct Token {
  enum class Kind : uint8_t { kEnd, kInt, kString, kIdent, kPunct };
  Kind kind = Kind::kEnd;
  std::string text;  // identifier, punctuation, or the decoded string
  int64_t value = 0;
  int column = 0;  // 1-based
};

absl::Status Unsupported(int column, std::string_view what) {
  return absl::UnimplementedError(
      StrCat("column ", column, ": ", what, " is not supported (", kSupported, ")"));
}
absl::Status Syntax(int column, std::string_view what) {
  return absl::InvalidArgumentError(StrCat("syntax error at column ", column, ": ", what));
}

class Lexer {
 public:
  explicit Lexer(std::string_view text) : text_(text) {}

  absl::StatusOr<std::vector<Token>> Tokens() {
    std::vector<Token> out;
    while (true) {
      SkipSpace();
      Token t;
      t.column = static_cast<int>(pos_) + 1;
      if (pos_ >= text_.size()) {
        out.push_back(t);
        return out;
      }
      char c = text_[pos_];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        absl::Status st = Number(&t);
        if (!st.ok()) return st;
      } else if (c == '"' || c == '\'') {
        absl::Status st = QuotedString(&t, /*raw=*/false);
        if (!st.ok()) return st;
      } else if ((c == 'r' || c == 'R') && pos_ + 1 < text_.size() &&
                 (text_[pos_ + 1] == '"' || text_[pos_ + 1] == '\'')) {
        ++pos_;
        absl::Status st = QuotedString(&t, /*raw=*/true);
        if (!st.ok()) return st;
      } else if ((c == 'b' || c == 'B') && pos_ + 1 < text_.size() &&
                 (text_[pos_ + 1] == '"' || text_[pos_ + 1] == '\'')) {
        return Unsupported(t.column, "a bytes literal");
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t start = pos_;
        while (pos_ < text_.size() &&
               (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
          ++pos_;
        }
        t.kind = Token::Kind::kIdent;
        t.text = std::string(text_.substr(start, pos_ - start));
      } else {
        static constexpr std::string_view kTwo[] = {"==", "!=", "<=", ">=", "&&", "||"};
        t.kind = Token::Kind::kPunct;
        for (std::string_view two : kTwo) {
          if (text_.substr(pos_, 2) == two) t.text = std::string(two);
        }
        if (t.text.empty()) {
          static constexpr std::string_view kOne = "<>!+-*/%()[]{}.,?:";
          if (kOne.find(c) == std::string_view::npos) {
            return Syntax(t.column, StrCat("unexpected character '", std::string(1, c), "'"));
          }
          t.text = std::string(1, c);
        }
        pos_ += t.text.size();
      }
      out.push_back(std::move(t));
    }
  }

 private:
  void SkipSpace() {
    while (pos_ < text_.size()) {
      if (std::isspace(static_cast<unsigned char>(text_[pos_]))) {
        ++pos_;
      } else if (text_.substr(pos_, 2) == "//") {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        return;
      }
    }
  }

  absl::Status Number(Token* t) {
    size_t start = pos_;
    const int column = t->column;
    int base = 10;
    if (text_.substr(pos_, 2) == "0x" || text_.substr(pos_, 2) == "0X") {
      base = 16;
      pos_ += 2;
    }
    size_t digits_start = pos_;
    while (pos_ < text_.size() && std::isxdigit(static_cast<unsigned char>(text_[pos_])) &&
           (base == 16 || std::isdigit(static_cast<unsigned char>(text_[pos_])))) {
      ++pos_;
    }
    if (pos_ == digits_start) return Syntax(column, "a number without digits");
    if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E')) {
      if (base == 10 &&
          (text_[pos_] != '.' || (pos_ + 1 < text_.size() &&
                                  std::isdigit(static_cast<unsigned char>(text_[pos_ + 1]))))) {
        return Unsupported(column, "a floating-point literal");
      }
    }
    if (pos_ < text_.size() && (text_[pos_] == 'u' || text_[pos_] == 'U')) {
      return Unsupported(column, "an unsigned integer literal");
    }
    u128 v = 0;
    for (size_t k = digits_start; k < pos_; ++k) {
      char c = static_cast<char>(std::tolower(static_cast<unsigned char>(text_[k])));
      v = v * base + static_cast<unsigned>(
                         std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : c - 'a' + 10);
      if (v > static_cast<u128>(INT64_MAX) + 1) {
        return Syntax(column, "integer literal out of range");
      }
    }
    (void)start;
    t->kind = Token::Kind::kInt;
    // 9223372036854775808 is only valid after a unary minus: the parser checks.
    t->value = static_cast<int64_t>(static_cast<uint64_t>(v));
    t->text = v > static_cast<u128>(INT64_MAX) ? "overflow" : "";
    return absl::OkStatus();
  }

  absl::Status QuotedString(Token* t, bool raw) {
    const char quote = text_[pos_];
    const int column = t->column;
    if (text_.substr(pos_, 3) == std::string(3, quote)) {
      return Unsupported(column, "a triple-quoted string");
    }
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= text_.size() || text_[pos_] == '\n') {
        return Syntax(column, "unterminated string");
      }
      char c = text_[pos_++];
      if (c == quote) break;
      if (c != '\\' || raw) {
        out.push_back(c);
        continue;
      }
      if (pos_ >= text_.size()) return Syntax(column, "unterminated string");
      char e = text_[pos_++];
      switch (e) {
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case '\\':
        case '"':
        case '\'':
        case '`':
        case '?':
          out.push_back(e);
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
        case 'X':
        case 'u':
        case 'U': {
          const size_t n = (e == 'x' || e == 'X') ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + n > text_.size()) return Syntax(column, "short escape sequence");
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            char h = text_[pos_ + k];
            if (!std::isxdigit(static_cast<unsigned char>(h))) {
              return Syntax(column, "bad escape sequence");
            }
            cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                     ? h - '0'
                                                     : std::tolower(h) - 'a' + 10);
          }
          pos_ += n;
          AppendUtf8(cp, &out);
          break;
        }
        default:
          if (e >= '0' && e <= '3' && pos_ + 1 < text_.size()) {  // octal \ooo
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2; ++k) {
              char o = text_[pos_++];
              if (o < '0' || o > '7') return Syntax(column, "bad octal escape");
              cp = cp * 8 + static_cast<uint32_t>(o - '0');
            }
            AppendUtf8(cp, &out);
            break;
          }
          return Syntax(column, StrCat("unknown escape \\", std::string(1, e)));
      }
    }
    t->kind = Token::Kind::kString;
    t->text = std::move(out);
    return absl::OkStatus();
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

// --- syntax tree -------------------------------------------------------------------------------

struct CelProgram::Node {
  enum class Kind : uint8_t {
    kLiteral,
    kIdent,   // `device` or a bound variable
    kSelect,  // args[0].name
    kHas,     // has(args[0].name)
    kIndex,   // args[0][args[1]]
    kCall,    // name(args...) or args[0].name(args[1..]) when has_target
    kList,
    kCond,  // args[0] ? args[1] : args[2]
    kAnd,
    kOr,
    kNot,
    kNeg,
    kBinary,  // args[0] name args[1]: == != < <= > >= in + - * / %
    kBind,    // cel.bind(name, args[0], args[1])
  };
  Kind kind = Kind::kLiteral;
  int column = 0;
  std::string name;
  bool has_target = false;
  std::vector<std::unique_ptr<Node>> args;
  // kLiteral
  Value literal;
};

namespace {

using Node = CelProgram::Node;
using NodePtr = std::unique_ptr<Node>;

NodePtr MakeNode(Node::Kind kind, int column, std::string name = "") {
  auto n = std::make_unique<Node>();
  n->kind = kind;
  n->column = column;
  n->name = std::move(name);
  return n;
}

struct FunctionSpec {
  std::string_view name;
  bool method;  // called on a target
  int args;     // arguments besides the target
};
// The functions and methods the evaluator implements.
constexpr FunctionSpec kFunctions[] = {
    {"size", false, 1},       {"size", true, 0},      {"quantity", false, 1},
    {"isQuantity", false, 1}, {"semver", false, 1},   {"isSemver", false, 1},
    {"int", false, 1},        {"string", false, 1},   {"startsWith", true, 1},
    {"endsWith", true, 1},    {"contains", true, 1},  {"lowerAscii", true, 0},
    {"upperAscii", true, 0},  {"compareTo", true, 1}, {"isGreaterThan", true, 1},
    {"isLessThan", true, 1},  {"isInteger", true, 0}, {"asInteger", true, 0},
    {"add", true, 1},         {"sub", true, 1},       {"sign", true, 0},
    {"major", true, 0},       {"minor", true, 0},     {"patch", true, 0},
};
constexpr std::string_view kMacros[] = {"all", "exists", "exists_one", "map", "filter"};

// How deep an expression may nest: parentheses, calls, lists, unary operators and every link of
// an operator or member chain (a && b && c is three deep) together. Parsing, evaluation and the
// tree's own destruction recurse that deep; a selector is user-written, so its depth is bounded
// before any of them can run out of stack. cel-go's parser refuses past 250 recursion levels;
// real selectors nest a handful.
constexpr int kMaxNesting = 250;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  absl::StatusOr<NodePtr> Parse() {
    TESSERA_ASSIGN_OR_RETURN(NodePtr root, Expr());
    if (Peek().kind != Token::Kind::kEnd) {
      return Syntax(Peek().column, StrCat("unexpected '", Peek().text, "'"));
    }
    return root;
  }

 private:
  const Token& Peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  bool IsPunct(std::string_view p, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::Kind::kPunct && Peek(ahead).text == p;
  }
  bool Accept(std::string_view p) {
    if (!IsPunct(p)) return false;
    ++i_;
    return true;
  }
  absl::Status Expect(std::string_view p) {
    if (Accept(p)) return absl::OkStatus();
    const Token& t = Peek();
    return Syntax(t.column, StrCat("expected '", p, "'",
                                   t.kind == Token::Kind::kEnd ? " at the end"
                                                               : StrCat(", found '", t.text, "'")));
  }

  absl::StatusOr<NodePtr> Expr() {
    DepthScope scope(depth_);
    TESSERA_RETURN_IF_ERROR(Deeper());
    TESSERA_ASSIGN_OR_RETURN(NodePtr cond, Or());
    if (!IsPunct("?")) return cond;
    const int column = Peek().column;
    ++i_;
    TESSERA_ASSIGN_OR_RETURN(NodePtr yes, Or());
    TESSERA_RETURN_IF_ERROR(Expect(":"));
    TESSERA_ASSIGN_OR_RETURN(NodePtr no, Expr());
    NodePtr n = MakeNode(Node::Kind::kCond, column);
    n->args.push_back(std::move(cond));
    n->args.push_back(std::move(yes));
    n->args.push_back(std::move(no));
    return n;
  }

  absl::StatusOr<NodePtr> Or() {
    DepthScope scope(depth_);
    TESSERA_ASSIGN_OR_RETURN(NodePtr left, And());
    while (IsPunct("||")) {
      TESSERA_RETURN_IF_ERROR(Deeper());
      const int column = Peek().column;
      ++i_;
      TESSERA_ASSIGN_OR_RETURN(NodePtr right, And());
      NodePtr n = MakeNode(Node::Kind::kOr, column);
      n->args.push_back(std::move(left));
      n->args.push_back(std::move(right));
      left = std::move(n);
    }
    return left;
  }

  absl::StatusOr<NodePtr> And() {
    DepthScope scope(depth_);
    TESSERA_ASSIGN_OR_RETURN(NodePtr left, Relation());
    while (IsPunct("&&")) {
      TESSERA_RETURN_IF_ERROR(Deeper());
      const int column = Peek().column;
      ++i_;
      TESSERA_ASSIGN_OR_RETURN(NodePtr right, Relation());
      NodePtr n = MakeNode(Node::Kind::kAnd, column);
      n->args.push_back(std::move(left));
      n->args.push_back(std::move(right));
      left = std::move(n);
    }
    return left;
  }

  absl::StatusOr<NodePtr> Relation() {
    DepthScope scope(depth_);
    TESSERA_ASSIGN_OR_RETURN(NodePtr left, Addition());
    while (true) {
      std::string op;
      for (std::string_view p : {"==", "!=", "<", "<=", ">", ">="}) {
        if (IsPunct(p)) op = std::string(p);
      }
      if (op.empty() && Peek().kind == Token::Kind::kIdent && Peek().text == "in") op = "in";
      if (op.empty()) return left;
      TESSERA_RETURN_IF_ERROR(Deeper());
      const int column = Peek().column;
      ++i_;
      TESSERA_ASSIGN_OR_RETURN(NodePtr right, Addition());
      NodePtr n = MakeNode(Node::Kind::kBinary, column, op);
      n->args.push_back(std::move(left));
      n->args.push_back(std::move(right));
      left = std::move(n);
    }
  }

  absl::StatusOr<NodePtr> Addition() {
    DepthScope scope(depth_);
    TESSERA_ASSIGN_OR_RETURN(NodePtr left, Multiplication());
    while (IsPunct("+") || IsPunct("-")) {
      TESSERA_RETURN_IF_ERROR(Deeper());
      const Token& op = t_[i_++];
      TESSERA_ASSIGN_OR_RETURN(NodePtr right, Multiplication());
      NodePtr n = MakeNode(Node::Kind::kBinary, op.column, op.text);
      n->args.push_back(std::move(left));
      n->args.push_back(std::move(right));
      left = std::move(n);
    }
    return left;
  }

  absl::StatusOr<NodePtr> Multiplication() {
    DepthScope scope(depth_);
    TESSERA_ASSIGN_OR_RETURN(NodePtr left, Unary());
    while (IsPunct("*") || IsPunct("/") || IsPunct("%")) {
      TESSERA_RETURN_IF_ERROR(Deeper());
      const Token& op = t_[i_++];
      TESSERA_ASSIGN_OR_RETURN(NodePtr right, Unary());
      NodePtr n = MakeNode(Node::Kind::kBinary, op.column, op.text);
      n->args.push_back(std::move(left));
      n->args.push_back(std::move(right));
      left = std::move(n);
    }
    return left;
  }

  absl::StatusOr<NodePtr> Unary() {
    DepthScope scope(depth_);
    if (IsPunct("!") || IsPunct("-")) TESSERA_RETURN_IF_ERROR(Deeper());
    if (IsPunct("!")) {
      const int column = Peek().column;
      ++i_;
      TESSERA_ASSIGN_OR_RETURN(NodePtr operand, Unary());
      NodePtr n = MakeNode(Node::Kind::kNot, column);
      n->args.push_back(std::move(operand));
      return n;
    }
    if (IsPunct("-")) {
      const int column = Peek().column;
      ++i_;
      // -9223372036854775808 is a literal of its own.
      if (Peek().kind == Token::Kind::kInt && Peek().text == "overflow" &&
          Peek().value == INT64_MIN) {
        ++i_;
        NodePtr n = MakeNode(Node::Kind::kLiteral, column);
        n->literal = Value::Int(INT64_MIN);
        return Member(std::move(n));
      }
      TESSERA_ASSIGN_OR_RETURN(NodePtr operand, Unary());
      NodePtr n = MakeNode(Node::Kind::kNeg, column);
      n->args.push_back(std::move(operand));
      return n;
    }
    TESSERA_ASSIGN_OR_RETURN(NodePtr primary, Primary());
    return Member(std::move(primary));
  }

  absl::StatusOr<std::vector<NodePtr>> Arguments(std::string_view close) {
    std::vector<NodePtr> args;
    if (Accept(close)) return args;
    while (true) {
      TESSERA_ASSIGN_OR_RETURN(NodePtr a, Expr());
      args.push_back(std::move(a));
      if (Accept(close)) return args;
      TESSERA_RETURN_IF_ERROR(Expect(","));
      if (close == "]" && Accept(close)) return args;  // a trailing comma in a list
    }
  }

  absl::Status CheckFunction(const Token& name, bool method, size_t args) {
    for (std::string_view m : kMacros) {
      if (method && name.text == m) {
        return Unsupported(name.column, StrCat("the macro '", name.text, "'"));
      }
    }
    bool known = false;
    for (const FunctionSpec& f : kFunctions) {
      if (f.name != name.text || f.method != method) continue;
      known = true;
      if (static_cast<size_t>(f.args) == args) return absl::OkStatus();
    }
    if (known) {
      return Syntax(name.column, StrCat("wrong number of arguments to '", name.text, "'"));
    }
    return Unsupported(name.column,
                       StrCat(method ? "the method '" : "the function '", name.text, "'"));
  }

  absl::StatusOr<NodePtr> Member(NodePtr operand) {
    DepthScope scope(depth_);
    while (true) {
      if (IsPunct(".") || IsPunct("[")) TESSERA_RETURN_IF_ERROR(Deeper());
      if (IsPunct(".")) {
        ++i_;
        const Token& field = Peek();
        if (field.kind != Token::Kind::kIdent) {
          return Syntax(field.column, "expected a field name after '.'");
        }
        ++i_;
        if (IsPunct("(")) {
          ++i_;
          // Macros bind their own variables: refuse them before their arguments (which name
          // those variables) read as undeclared references.
          for (std::string_view m : kMacros) {
            if (field.text == m) return Unsupported(field.column, StrCat("the macro '", m, "'"));
          }
          TESSERA_ASSIGN_OR_RETURN(std::vector<NodePtr> args, Arguments(")"));
          TESSERA_RETURN_IF_ERROR(CheckFunction(field, true, args.size()));
          NodePtr n = MakeNode(Node::Kind::kCall, field.column, field.text);
          n->has_target = true;
          n->args.push_back(std::move(operand));
          for (NodePtr& a : args) n->args.push_back(std::move(a));
          operand = std::move(n);
          continue;
        }
        if (operand->kind == Node::Kind::kIdent && operand->name == "device") {
          static const std::set<std::string> kFields = {"driver", "attributes", "capacity",
                                                        "allowMultipleAllocations"};
          if (!kFields.contains(field.text)) {
            return Syntax(field.column, StrCat("undefined field '", field.text,
                                               "' (a device has driver, attributes, capacity, "
                                               "allowMultipleAllocations)"));
          }
        }
        NodePtr n = MakeNode(Node::Kind::kSelect, field.column, field.text);
        n->args.push_back(std::move(operand));
        operand = std::move(n);
      } else if (IsPunct("[")) {
        const int column = Peek().column;
        ++i_;
        TESSERA_ASSIGN_OR_RETURN(NodePtr key, Expr());
        TESSERA_RETURN_IF_ERROR(Expect("]"));
        NodePtr n = MakeNode(Node::Kind::kIndex, column);
        n->args.push_back(std::move(operand));
        n->args.push_back(std::move(key));
        operand = std::move(n);
      } else if (IsPunct("{")) {
        return Unsupported(Peek().column, "a message literal");
      } else {
        return operand;
      }
    }
  }

  absl::StatusOr<NodePtr> Primary() {
    const Token& t = Peek();
    switch (t.kind) {
      case Token::Kind::kEnd:
        return Syntax(t.column, "unexpected end of expression");
      case Token::Kind::kInt: {
        if (t.text == "overflow") return Syntax(t.column, "integer literal out of range");
        ++i_;
        NodePtr n = MakeNode(Node::Kind::kLiteral, t.column);
        n->literal = Value::Int(t.value);
        return n;
      }
      case Token::Kind::kString: {
        ++i_;
        NodePtr n = MakeNode(Node::Kind::kLiteral, t.column);
        n->literal = Value::String(t.text);
        return n;
      }
      case Token::Kind::kPunct:
        if (Accept("(")) {
          TESSERA_ASSIGN_OR_RETURN(NodePtr inner, Expr());
          TESSERA_RETURN_IF_ERROR(Expect(")"));
          return inner;
        }
        if (Accept("[")) {
          TESSERA_ASSIGN_OR_RETURN(std::vector<NodePtr> items, Arguments("]"));
          NodePtr n = MakeNode(Node::Kind::kList, t.column);
          n->args = std::move(items);
          return n;
        }
        if (IsPunct("{")) return Unsupported(t.column, "a map literal");
        if (IsPunct(".")) return Unsupported(t.column, "a leading-dot identifier");
        return Syntax(t.column, StrCat("unexpected '", t.text, "'"));
      case Token::Kind::kIdent:
        break;
    }
    const Token name = t;
    ++i_;
    if (name.text == "true" || name.text == "false") {
      NodePtr n = MakeNode(Node::Kind::kLiteral, name.column);
      n->literal = Value::Bool(name.text == "true");
      return n;
    }
    if (name.text == "null") {
      NodePtr n = MakeNode(Node::Kind::kLiteral, name.column);
      n->literal = Value();
      return n;
    }
    if (name.text == "in") return Syntax(name.column, "unexpected 'in'");
    if (name.text == "cel" && IsPunct(".")) return Bind(name);
    if (name.text == "has" && IsPunct("(")) {
      ++i_;
      TESSERA_ASSIGN_OR_RETURN(NodePtr arg, Expr());
      TESSERA_RETURN_IF_ERROR(Expect(")"));
      if (arg->kind != Node::Kind::kSelect) {
        return Syntax(name.column, "has() needs a field selection, such as has(x.field)");
      }
      arg->kind = Node::Kind::kHas;
      return arg;
    }
    if (IsPunct("(")) {
      ++i_;
      TESSERA_ASSIGN_OR_RETURN(std::vector<NodePtr> args, Arguments(")"));
      TESSERA_RETURN_IF_ERROR(CheckFunction(name, false, args.size()));
      NodePtr n = MakeNode(Node::Kind::kCall, name.column, name.text);
      n->args = std::move(args);
      return n;
    }
    if (name.text != "device" &&
        std::find(scope_.begin(), scope_.end(), name.text) == scope_.end()) {
      return Syntax(name.column, StrCat("undeclared reference to '", name.text,
                                        "' (selectors see only `device`)"));
    }
    return MakeNode(Node::Kind::kIdent, name.column, name.text);
  }

  // cel.bind(var, init, expr)
  absl::StatusOr<NodePtr> Bind(const Token& cel) {
    ++i_;  // '.'
    const Token& fn = Peek();
    if (fn.kind != Token::Kind::kIdent || fn.text != "bind" || !IsPunct("(", 1)) {
      return Unsupported(fn.column, StrCat("cel.", fn.text));
    }
    i_ += 2;
    const Token& var = Peek();
    if (var.kind != Token::Kind::kIdent) {
      return Syntax(var.column, "cel.bind needs a variable name first");
    }
    ++i_;
    TESSERA_RETURN_IF_ERROR(Expect(","));
    TESSERA_ASSIGN_OR_RETURN(NodePtr init, Expr());
    TESSERA_RETURN_IF_ERROR(Expect(","));
    scope_.push_back(var.text);
    absl::StatusOr<NodePtr> body = Expr();
    scope_.pop_back();
    if (!body.ok()) return body.status();
    TESSERA_RETURN_IF_ERROR(Expect(")"));
    NodePtr n = MakeNode(Node::Kind::kBind, cel.column, var.text);
    n->args.push_back(std::move(init));
    n->args.push_back(std::move(*body));
    return n;
  }

  // One level deeper on the way to the current token (see kMaxNesting); a production's levels
  // are given back when it returns (DepthScope).
  absl::Status Deeper() {
    if (++depth_ <= kMaxNesting) return absl::OkStatus();
    return absl::InvalidArgumentError(
        StrCat("column ", Peek().column, ": the expression nests deeper than ", kMaxNesting,
               " levels (parentheses, calls, lists, unary operators and chained operators or "
               "field accesses together); split or simplify the selector"));
  }
  struct DepthScope {
    explicit DepthScope(int& depth) : depth_(depth), saved_(depth) {}
    ~DepthScope() { depth_ = saved_; }
    int& depth_;
    const int saved_;
  };

  std::vector<Token> t_;
  size_t i_ = 0;
  std::vector<std::string> scope_;
  int depth_ = 0;
};

// --- evaluation --------------------------------------------------------------------------------

struct Scope {
  std::string_view name;
  const Value* value;
  const Scope* parent;
};

class Evaluator {
 public:
  explicit Evaluator(const CelDevice& device) : device_(device) {}

  Value Eval(const Node& n, const Scope* scope) {
    switch (n.kind) {
      case Node::Kind::kLiteral:
        return n.literal;
      case Node::Kind::kIdent:
        for (const Scope* s = scope; s != nullptr; s = s->parent) {
          if (s->name == n.name) return *s->value;
        }
        if (n.name == "device") {
          Value v;
          v.type = Value::Type::kDevice;
          return v;
        }
        return Value::Error(StrCat("undeclared reference to '", n.name, "'"));
      case Node::Kind::kSelect:
        return Select(Eval(*n.args[0], scope), Value::String(n.name), /*test=*/false);
      case Node::Kind::kHas:
        return Select(Eval(*n.args[0], scope), Value::String(n.name), /*test=*/true);
      case Node::Kind::kIndex:
        return Select(Eval(*n.args[0], scope), Eval(*n.args[1], scope), /*test=*/false);
      case Node::Kind::kList: {
        auto items = std::make_shared<std::vector<Value>>();
        for (const NodePtr& a : n.args) {
          Value v = Eval(*a, scope);
          if (v.error()) return v;
          items->push_back(std::move(v));
        }
        Value v;
        v.type = Value::Type::kList;
        v.list = std::move(items);
        return v;
      }
      case Node::Kind::kCond: {
        Value c = Eval(*n.args[0], scope);
        if (c.error()) return c;
        if (c.type != Value::Type::kBool) {
          return Value::Error(StrCat("no such overload: ", TypeName(c), " ? _ : _"));
        }
        return Eval(*n.args[c.b ? 1 : 2], scope);
      }
      case Node::Kind::kAnd:
      case Node::Kind::kOr: {
        const bool is_and = n.kind == Node::Kind::kAnd;
        Value l = Eval(*n.args[0], scope);
        if (l.type == Value::Type::kBool && l.b != is_and) return l;  // decided
        Value r = Eval(*n.args[1], scope);
        if (r.type == Value::Type::kBool && r.b != is_and) return r;
        if (l.error()) return l;
        if (r.error()) return r;
        if (l.type != Value::Type::kBool || r.type != Value::Type::kBool) {
          return NoOverload(is_and ? "&&" : "||", l, r);
        }
        return Value::Bool(is_and);
      }
      case Node::Kind::kNot: {
        Value v = Eval(*n.args[0], scope);
        if (v.error()) return v;
        if (v.type != Value::Type::kBool) {
          return Value::Error(StrCat("no such overload: !", TypeName(v)));
        }
        return Value::Bool(!v.b);
      }
      case Node::Kind::kNeg: {
        Value v = Eval(*n.args[0], scope);
        if (v.error()) return v;
        if (v.type != Value::Type::kInt) {
          return Value::Error(StrCat("no such overload: -", TypeName(v)));
        }
        if (v.i == INT64_MIN) return Value::Error("integer overflow");
        return Value::Int(-v.i);
      }
      case Node::Kind::kBinary:
        return Binary(n.name, Eval(*n.args[0], scope), Eval(*n.args[1], scope));
      case Node::Kind::kBind: {
        Value init = Eval(*n.args[0], scope);
        Scope inner{n.name, &init, scope};
        return Eval(*n.args[1], &inner);
      }
      case Node::Kind::kCall: {
        std::vector<Value> args;
        for (const NodePtr& a : n.args) {
          args.push_back(Eval(*a, scope));
          if (args.back().error()) return args.back();
        }
        return Call(n.name, n.has_target, args);
      }
    }
    return Value::Error("internal error: unknown node");
  }

 private:
  Value Select(const Value& target, const Value& key, bool test) {
    if (target.error()) return target;
    if (key.error()) return key;
    if (target.type == Value::Type::kList) {
      if (test) return Value::Error("has() on a list");
      if (key.type != Value::Type::kInt) return NoOverload("[]", target, key);
      if (key.i < 0 || key.i >= static_cast<int64_t>(target.list->size())) {
        return Value::Error(StrCat("index out of range: ", key.i));
      }
      return (*target.list)[static_cast<size_t>(key.i)];
    }
    if (key.type != Value::Type::kString) return NoOverload("[]", target, key);
    const std::string& k = key.s;
    const Device& dev = *device_.device;
    switch (target.type) {
      case Value::Type::kDevice: {
        if (test) {
          return Value::Bool(k == "driver" || k == "attributes" || k == "capacity" ||
                             k == "allowMultipleAllocations");
        }
        if (k == "driver") return Value::String(std::string(device_.driver));
        if (k == "allowMultipleAllocations") return Value::Bool(dev.allow_multiple_allocations);
        Value v;
        if (k == "attributes") {
          v.type = Value::Type::kAttributeDomains;
        } else if (k == "capacity") {
          v.type = Value::Type::kCapacityDomains;
        } else {
          return Value::Error(StrCat("no such key: ", k));
        }
        return v;
      }
      case Value::Type::kAttributeDomains: {
        auto it = dev.attributes.find(k);
        if (test) return Value::Bool(it != dev.attributes.end());
        static const std::map<std::string, AttributeValue> kEmpty;
        Value v;
        v.type = Value::Type::kAttributes;
        v.attributes = it == dev.attributes.end() ? &kEmpty : &it->second;
        return v;
      }
      case Value::Type::kAttributes: {
        auto it = target.attributes->find(k);
        if (test) return Value::Bool(it != target.attributes->end());
        if (it == target.attributes->end()) return Value::Error(StrCat("no such key: ", k));
        return FromAttribute(it->second);
      }
      case Value::Type::kCapacityDomains: {
        auto it = dev.capacity.find(k);
        if (test) return Value::Bool(it != dev.capacity.end());
        static const std::map<std::string, DeviceCapacity> kEmpty;
        Value v;
        v.type = Value::Type::kCapacities;
        v.capacities = it == dev.capacity.end() ? &kEmpty : &it->second;
        return v;
      }
      case Value::Type::kCapacities: {
        auto it = target.capacities->find(k);
        if (test) return Value::Bool(it != target.capacities->end());
        if (it == target.capacities->end()) return Value::Error(StrCat("no such key: ", k));
        return Value::Quantity(it->second.value);
      }
      default:
        return Value::Error(
            StrCat("no such field '", k, "' on a value of type ", TypeName(target)));
    }
  }

  Value Binary(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return Equal(a, b);
    if (op == "!=") {
      Value e = Equal(a, b);
      if (!e.error()) e.b = !e.b;
      return e;
    }
    if (a.error()) return a;
    if (b.error()) return b;
    if (op == "in") {
      if (b.type == Value::Type::kList) {
        for (const Value& item : *b.list) {
          Value e = Equal(a, item);
          if (e.error()) return e;
          if (e.b) return Value::Bool(true);
        }
        return Value::Bool(false);
      }
      if (a.type == Value::Type::kString &&
          (b.type == Value::Type::kAttributeDomains || b.type == Value::Type::kAttributes ||
           b.type == Value::Type::kCapacityDomains || b.type == Value::Type::kCapacities)) {
        return Select(b, a, /*test=*/true);
      }
      return NoOverload("in", a, b);
    }
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      int cmp = 0;
      if (a.type == Value::Type::kInt && b.type == Value::Type::kInt) {
        cmp = a.i < b.i ? -1 : a.i > b.i ? 1 : 0;
      } else if (a.type == Value::Type::kString && b.type == Value::Type::kString) {
        cmp = a.s.compare(b.s);
      } else if (a.type == Value::Type::kBool && b.type == Value::Type::kBool) {
        cmp = static_cast<int>(a.b) - static_cast<int>(b.b);
      } else {
        return NoOverload(op, a, b);
      }
      if (op == "<") return Value::Bool(cmp < 0);
      if (op == "<=") return Value::Bool(cmp <= 0);
      if (op == ">") return Value::Bool(cmp > 0);
      return Value::Bool(cmp >= 0);
    }
    if (op == "+" && a.type == Value::Type::kString && b.type == Value::Type::kString) {
      return Value::String(a.s + b.s);
    }
    if (op == "+" && a.type == Value::Type::kList && b.type == Value::Type::kList) {
      auto items = std::make_shared<std::vector<Value>>(*a.list);
      items->insert(items->end(), b.list->begin(), b.list->end());
      Value v;
      v.type = Value::Type::kList;
      v.list = std::move(items);
      return v;
    }
    if (a.type != Value::Type::kInt || b.type != Value::Type::kInt) return NoOverload(op, a, b);
    int64_t r = 0;
    bool overflow = false;
    if (op == "+") {
      overflow = __builtin_add_overflow(a.i, b.i, &r);
    } else if (op == "-") {
      overflow = __builtin_sub_overflow(a.i, b.i, &r);
    } else if (op == "*") {
      overflow = __builtin_mul_overflow(a.i, b.i, &r);
    } else {
      if (b.i == 0) return Value::Error(op == "/" ? "division by zero" : "modulus by zero");
      if (a.i == INT64_MIN && b.i == -1) return Value::Error("integer overflow");
      r = op == "/" ? a.i / b.i : a.i % b.i;
    }
    if (overflow) return Value::Error("integer overflow");
    return Value::Int(r);
  }

  static Value ParseQuantity(const std::string& text) {
    absl::StatusOr<int64_t> q = ParseMilli(text);
    if (!q.ok()) {
      return Value::Error(StrCat("quantity(\"", text, "\"): ", FromAbsl(q.status().message())));
    }
    return Value::Quantity(*q);
  }

  // A quantity operand: a quantity, or an int (whole units).
  static std::optional<int64_t> AsMilli(const Value& v) {
    if (v.type == Value::Type::kQuantity) return v.i;
    if (v.type == Value::Type::kInt && v.i <= INT64_MAX / 1000 && v.i >= INT64_MIN / 1000) {
      return v.i * 1000;
    }
    return std::nullopt;
  }

  Value Call(const std::string& fn, bool method, const std::vector<Value>& args) {
    const Value* target = method ? &args[0] : nullptr;
    const Value& a0 = method ? (args.size() > 1 ? args[1] : args[0]) : args[0];
    auto bad = [&]() {
      return Value::Error(StrCat("no such overload: ", method ? TypeName(*target) : "",
                                 method ? "." : "", fn, "(",
                                 args.size() > (method ? 1u : 0u) ? TypeName(a0) : "", ")"));
    };
    if (fn == "size") {
      const Value& v = method ? *target : a0;
      if (v.type == Value::Type::kString) {
        int64_t n = 0;
        for (unsigned char c : v.s) n += (c & 0xC0) != 0x80;  // code points
        return Value::Int(n);
      }
      if (v.type == Value::Type::kList) return Value::Int(static_cast<int64_t>(v.list->size()));
      if (v.type == Value::Type::kAttributes) {
        return Value::Int(static_cast<int64_t>(v.attributes->size()));
      }
      if (v.type == Value::Type::kCapacities) {
        return Value::Int(static_cast<int64_t>(v.capacities->size()));
      }
      return bad();
    }
    if (!method) {
      if (fn == "quantity" || fn == "isQuantity") {
        if (a0.type != Value::Type::kString) return bad();
        Value q = ParseQuantity(a0.s);
        return fn == "quantity" ? q : Value::Bool(!q.error());
      }
      if (fn == "semver" || fn == "isSemver") {
        if (a0.type != Value::Type::kString) return bad();
        std::optional<Semver> v = ParseSemver(a0.s);
        if (fn == "isSemver") return Value::Bool(v.has_value());
        if (!v) return Value::Error(StrCat("semver(\"", a0.s, "\"): not a semantic version"));
        return Value::Version(*v);
      }
      if (fn == "int") {
        if (a0.type == Value::Type::kInt) return a0;
        if (a0.type == Value::Type::kString) {
          errno = 0;
          char* end = nullptr;
          long long v = std::strtoll(a0.s.c_str(), &end, 10);
          if (a0.s.empty() || *end != '\0' || errno != 0) {
            return Value::Error(StrCat("int(\"", a0.s, "\"): not an integer"));
          }
          return Value::Int(v);
        }
        return bad();
      }
      if (fn == "string") {
        if (a0.type == Value::Type::kString) return a0;
        if (a0.type == Value::Type::kInt) return Value::String(std::to_string(a0.i));
        if (a0.type == Value::Type::kBool) return Value::String(a0.b ? "true" : "false");
        if (a0.type == Value::Type::kQuantity) return Value::String(FormatMilli(a0.i));
        return bad();
      }
      return bad();
    }
    const Value& t = *target;
    if (t.type == Value::Type::kString) {
      if (fn == "lowerAscii" || fn == "upperAscii") {
        std::string s = t.s;
        for (char& c : s) {
          c = fn == "lowerAscii" ? static_cast<char>(std::tolower(static_cast<unsigned char>(c)))
                                 : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        }
        return Value::String(std::move(s));
      }
      if (a0.type != Value::Type::kString) return bad();
      if (fn == "startsWith") return Value::Bool(t.s.starts_with(a0.s));
      if (fn == "endsWith") return Value::Bool(t.s.ends_with(a0.s));
      if (fn == "contains") return Value::Bool(t.s.find(a0.s) != std::string::npos);
      return bad();
    }
    if (t.type == Value::Type::kQuantity) {
      if (fn == "isInteger") return Value::Bool(t.i % 1000 == 0);
      if (fn == "asInteger") {
        if (t.i % 1000 != 0) return Value::Error("cannot convert value to integer");
        return Value::Int(t.i / 1000);
      }
      if (fn == "sign") return Value::Int(t.i > 0 ? 1 : t.i < 0 ? -1 : 0);
      std::optional<int64_t> other = AsMilli(a0);
      if (fn == "compareTo" || fn == "isGreaterThan" || fn == "isLessThan") {
        if (a0.type != Value::Type::kQuantity) return bad();
        const int cmp = t.i < a0.i ? -1 : t.i > a0.i ? 1 : 0;
        if (fn == "compareTo") return Value::Int(cmp);
        return Value::Bool(fn == "isGreaterThan" ? cmp > 0 : cmp < 0);
      }
      if (fn == "add" || fn == "sub") {
        if (!other) return bad();
        int64_t r = 0;
        if (fn == "add" ? __builtin_add_overflow(t.i, *other, &r)
                        : __builtin_sub_overflow(t.i, *other, &r)) {
          return Value::Error("quantity overflow");
        }
        return Value::Quantity(r);
      }
      return bad();
    }
    if (t.type == Value::Type::kSemver) {
      if (fn == "major") return Value::Int(static_cast<int64_t>(t.ver->major));
      if (fn == "minor") return Value::Int(static_cast<int64_t>(t.ver->minor));
      if (fn == "patch") return Value::Int(static_cast<int64_t>(t.ver->patch));
      if (a0.type != Value::Type::kSemver) return bad();
      const int cmp = CompareSemver(*t.ver, *a0.ver);
      if (fn == "compareTo") return Value::Int(cmp);
      if (fn == "isGreaterThan") return Value::Bool(cmp > 0);
      if (fn == "isLessThan") return Value::Bool(cmp < 0);
      return bad();
    }
    return bad();
  }

  const CelDevice& device_;
};

}  // namespace

CelProgram::~CelProgram() = default;

absl::StatusOr<std::shared_ptr<const CelProgram>> CelProgram::Compile(std::string_view expression) {
  Lexer lexer(expression);
  TESSERA_ASSIGN_OR_RETURN(std::vector<Token> tokens, lexer.Tokens());
  Parser parser(std::move(tokens));
  TESSERA_ASSIGN_OR_RETURN(NodePtr root, parser.Parse());
  auto p = std::shared_ptr<CelProgram>(new CelProgram());
  p->expression_ = std::string(expression);
  p->root_ = std::move(root);
  return std::shared_ptr<const CelProgram>(std::move(p));
}

absl::StatusOr<bool> CelProgram::Matches(const CelDevice& device) const {
  Evaluator eval(device);
  Value v = eval.Eval(*root_, nullptr);
  if (v.error()) return absl::FailedPreconditionError(v.s);
  if (v.type != Value::Type::kBool) {
    return absl::FailedPreconditionError(
        StrCat("the result is of type ", TypeName(v), ", not bool"));
  }
  return v.b;
}

}  // namespace tessera::k8s::dra
