// Expression parsing with jinja2's precedence: condexpr < or < and < not < compare < +,- < ~ <
// *,/,//,% < ** < unary -,+ < postfix (.x, [x], call) < filters and tests.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizer/jinja/parser_internal.h"

namespace linfer::tokenizer::jinja {

ExprPtr Parser::Node(Expr::Kind kind, SourcePos pos) const {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseTuple(TupleMode mode,
                                           const std::vector<absl::string_view>& extra_end) {
  const SourcePos start = Cur().pos;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  auto at_end = [&] {
    const Token& t = Cur();
    if (t.type == TokenType::kVariableEnd || t.type == TokenType::kBlockEnd ||
        (t.type == TokenType::kOperator && t.text == ")")) {
      return true;
    }
    for (absl::string_view e : extra_end) {
      if (IsName(e)) return true;
    }
    return false;
  };
  while (true) {
    if (!items.empty()) RETURN_IF_ERROR(Expect(TokenType::kOperator, ",", "','"));
    if (at_end()) break;
    ExprPtr item;
    if (mode == TupleMode::kSimplified) {
      ASSIGN_OR_RETURN(item, ParsePrimary());
    } else {
      ASSIGN_OR_RETURN(item, ParseExpression(mode == TupleMode::kFull));
    }
    items.push_back(std::move(item));
    if (!IsOp(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    return Error(Cur(), absl::StrCat("Expected an expression, got ", Describe(Cur())));
  }
  ExprPtr t = Node(Expr::Kind::kTuple, start);
  t->args = std::move(items);
  return t;
}

absl::StatusOr<ExprPtr> Parser::ParseExpression(bool with_condexpr) {
  RETURN_IF_ERROR(Enter());
  absl::StatusOr<ExprPtr> e = with_condexpr ? ParseCondExpr() : ParseOr();
  --depth_;
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseCondExpr() {
  ASSIGN_OR_RETURN(ExprPtr expr1, ParseOr());
  while (IsName("if")) {
    const SourcePos pos = Cur().pos;
    ++pos_;
    ExprPtr node = Node(Expr::Kind::kCondExpr, pos);
    ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
    ExprPtr otherwise;
    if (IsName("else")) {
      ++pos_;
      ASSIGN_OR_RETURN(otherwise, ParseExpression(true));
    }
    node->args.push_back(std::move(test));
    node->args.push_back(std::move(expr1));
    node->args.push_back(std::move(otherwise));
    expr1 = std::move(node);
  }
  return expr1;
}

absl::StatusOr<ExprPtr> Parser::ParseOr() {
  ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (IsName("or")) {
    ExprPtr node = Node(Expr::Kind::kOr, Cur().pos);
    ++pos_;
    ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    left = std::move(node);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseAnd() {
  ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (IsName("and")) {
    ExprPtr node = Node(Expr::Kind::kAnd, Cur().pos);
    ++pos_;
    ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    left = std::move(node);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseNot() {
  if (!IsName("not")) return ParseCompare();
  ExprPtr node = Node(Expr::Kind::kNot, Cur().pos);
  ++pos_;
  RETURN_IF_ERROR(Enter());
  ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
  --depth_;
  node->args.push_back(std::move(operand));
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseCompare() {
  const SourcePos pos = Cur().pos;
  ASSIGN_OR_RETURN(ExprPtr expr, ParseMath1());
  ExprPtr node;
  while (true) {
    std::string op;
    const Token& t = Cur();
    if (t.type == TokenType::kOperator && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                           t.text == "<=" || t.text == ">" || t.text == ">=")) {
      op = t.text;
      ++pos_;
    } else if (IsName("in")) {
      op = "in";
      ++pos_;
    } else if (IsName("not") && Peek(1).type == TokenType::kName && Peek(1).text == "in") {
      op = "notin";
      pos_ += 2;
    } else {
      break;
    }
    if (!node) {
      node = Node(Expr::Kind::kCompare, pos);
      node->args.push_back(std::move(expr));
    }
    ASSIGN_OR_RETURN(ExprPtr rhs, ParseMath1());
    node->ops.push_back(op);
    node->args.push_back(std::move(rhs));
  }
  return node ? std::move(node) : std::move(expr);
}

absl::StatusOr<ExprPtr> Parser::ParseMath1() {
  ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
  while (IsOp("+") || IsOp("-")) {
    ExprPtr node = Node(Expr::Kind::kBinary, Cur().pos);
    node->name = Cur().text;
    ++pos_;
    ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    left = std::move(node);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseConcat() {
  const SourcePos pos = Cur().pos;
  ASSIGN_OR_RETURN(ExprPtr first, ParseMath2());
  if (!IsOp("~")) return first;
  ExprPtr node = Node(Expr::Kind::kConcat, pos);
  node->args.push_back(std::move(first));
  while (IsOp("~")) {
    ++pos_;
    ASSIGN_OR_RETURN(ExprPtr next, ParseMath2());
    node->args.push_back(std::move(next));
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseMath2() {
  ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    ExprPtr node = Node(Expr::Kind::kBinary, Cur().pos);
    node->name = Cur().text;
    ++pos_;
    ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    left = std::move(node);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParsePow() {
  ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
  while (IsOp("**")) {
    ExprPtr node = Node(Expr::Kind::kBinary, Cur().pos);
    node->name = "**";
    ++pos_;
    ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    left = std::move(node);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
  RETURN_IF_ERROR(Enter());
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    node = Node(IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos, Cur().pos);
    ++pos_;
    ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
    node->args.push_back(std::move(operand));
  } else {
    ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) {
    ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
  }
  --depth_;
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParsePrimary() {
  const Token& t = Cur();
  if (t.type == TokenType::kName) {
    ExprPtr node = Node(Expr::Kind::kConst, t.pos);
    if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
      node->literal = Value::Bool(t.text == "true" || t.text == "True");
    } else if (t.text == "none" || t.text == "None") {
      node->literal = Value::None();
    } else {
      node->kind = Expr::Kind::kName;
      node->name = t.text;
    }
    ++pos_;
    return node;
  }
  if (t.type == TokenType::kString) {
    ExprPtr node = Node(Expr::Kind::kConst, t.pos);
    std::string s;
    while (Cur().type == TokenType::kString) s += tokens_[pos_++].text;
    node->literal = Value::String(std::move(s));
    return node;
  }
  if (t.type == TokenType::kInteger || t.type == TokenType::kFloat) {
    ExprPtr node = Node(Expr::Kind::kConst, t.pos);
    node->literal =
        t.type == TokenType::kInteger ? Value::Int(t.int_value) : Value::Float(t.float_value);
    ++pos_;
    return node;
  }
  if (IsOp("(")) {
    const SourcePos pos = t.pos;
    ++pos_;
    if (IsOp(")")) {
      ++pos_;
      return Node(Expr::Kind::kTuple, pos);
    }
    ASSIGN_OR_RETURN(ExprPtr node, ParseTuple(TupleMode::kFull, {}));
    RETURN_IF_ERROR(Expect(TokenType::kOperator, ")", "')'"));
    return node;
  }
  if (IsOp("[")) return ParseListOrDict(false);
  if (IsOp("{")) return ParseListOrDict(true);
  return Error(t, absl::StrCat("unexpected ", Describe(t)));
}

absl::StatusOr<ExprPtr> Parser::ParseListOrDict(bool is_dict) {
  ExprPtr node = Node(is_dict ? Expr::Kind::kDict : Expr::Kind::kList, Cur().pos);
  const absl::string_view close = is_dict ? "}" : "]";
  ++pos_;
  while (!IsOp(close)) {
    if (!node->args.empty()) RETURN_IF_ERROR(Expect(TokenType::kOperator, ",", "','"));
    if (IsOp(close)) break;
    ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
    node->args.push_back(std::move(item));
    if (is_dict) {
      RETURN_IF_ERROR(Expect(TokenType::kOperator, ":", "':'"));
      ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      node->args.push_back(std::move(value));
    }
  }
  ++pos_;
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (IsOp(".") || IsOp("[")) {
      ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (IsOp("(")) {
      ExprPtr call = Node(Expr::Kind::kCall, Cur().pos);
      call->args.push_back(std::move(node));
      RETURN_IF_ERROR(ParseCallArgs(call.get()));
      node = std::move(call);
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (IsOp("|")) {
      ASSIGN_OR_RETURN(node, ParseFilterChain(std::move(node), false));
    } else if (IsName("is")) {
      ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (IsOp("(")) {
      ExprPtr call = Node(Expr::Kind::kCall, Cur().pos);
      call->args.push_back(std::move(node));
      RETURN_IF_ERROR(ParseCallArgs(call.get()));
      node = std::move(call);
    } else {
      return node;
    }
  }
}

}  // namespace linfer::tokenizer::jinja
