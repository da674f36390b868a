// Postfix parts of expressions: subscripts and slices, call arguments, filter chains and
// `is` tests (jinja2.parser's parse_subscript, parse_call_args, parse_filter, parse_test).
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizer/jinja/parser_internal.h"

namespace linfer::tokenizer::jinja {

absl::StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr node) {
  const Token& t = Cur();
  ++pos_;
  if (t.text == ".") {
    const Token& attr = Cur();
    ++pos_;
    if (attr.type == TokenType::kName) {
      ExprPtr e = Node(Expr::Kind::kGetattr, t.pos);
      e->name = attr.text;
      e->args.push_back(std::move(node));
      return e;
    }
    if (attr.type != TokenType::kInteger) return Error(attr, "expected name or number");
    ExprPtr e = Node(Expr::Kind::kGetitem, t.pos);
    ExprPtr index = Node(Expr::Kind::kConst, attr.pos);
    index->literal = Value::Int(attr.int_value);
    e->args.push_back(std::move(node));
    e->args.push_back(std::move(index));
    return e;
  }
  std::vector<ExprPtr> args;
  while (!IsOp("]")) {
    if (!args.empty()) RETURN_IF_ERROR(Expect(TokenType::kOperator, ",", "','"));
    ASSIGN_OR_RETURN(ExprPtr a, ParseSubscribed());
    args.push_back(std::move(a));
  }
  ++pos_;
  ExprPtr e = Node(Expr::Kind::kGetitem, t.pos);
  e->args.push_back(std::move(node));
  if (args.size() == 1) {
    e->args.push_back(std::move(args[0]));
  } else {
    ExprPtr tuple = Node(Expr::Kind::kTuple, t.pos);
    tuple->args = std::move(args);
    e->args.push_back(std::move(tuple));
  }
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseSubscribed() {
  const SourcePos pos = Cur().pos;
  ExprPtr start;
  if (!IsOp(":")) {
    ASSIGN_OR_RETURN(start, ParseExpression(true));
    if (!IsOp(":")) return start;
  }
  ++pos_;  // ':'
  ExprPtr slice = Node(Expr::Kind::kSlice, pos);
  ExprPtr stop, step;
  if (!IsOp(":") && !IsOp("]") && !IsOp(",")) {
    ASSIGN_OR_RETURN(stop, ParseExpression(true));
  }
  if (IsOp(":")) {
    ++pos_;
    if (!IsOp("]") && !IsOp(",")) {
      ASSIGN_OR_RETURN(step, ParseExpression(true));
    }
  }
  slice->args.push_back(std::move(start));
  slice->args.push_back(std::move(stop));
  slice->args.push_back(std::move(step));
  return slice;
}

absl::Status Parser::ParseCallArgs(Expr* node) {
  RETURN_IF_ERROR(Expect(TokenType::kOperator, "(", "'('"));
  bool first = true;
  while (!IsOp(")")) {
    if (!first) {
      RETURN_IF_ERROR(Expect(TokenType::kOperator, ",", "','"));
      if (IsOp(")")) break;
    }
    first = false;
    if (IsOp("*") || IsOp("**")) return Error(Cur(), "*args and **kwargs are not supported");
    if (Cur().type == TokenType::kName && Peek(1).type == TokenType::kOperator &&
        Peek(1).text == "=") {
      std::string key = Cur().text;
      pos_ += 2;
      ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      node->kwargs.emplace_back(std::move(key), std::move(value));
    } else {
      if (!node->kwargs.empty()) {
        return Error(Cur(), "invalid syntax for function call expression");
      }
      ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      node->args.push_back(std::move(value));
    }
  }
  ++pos_;
  return absl::OkStatus();
}

absl::StatusOr<ExprPtr> Parser::ParseFilterChain(ExprPtr node, bool start_inline) {
  while (IsOp("|") || start_inline) {
    if (!start_inline) ++pos_;
    start_inline = false;
    if (Cur().type != TokenType::kName) return Error(Cur(), "expected filter name");
    ExprPtr f = Node(Expr::Kind::kFilter, Cur().pos);
    f->name = Cur().text;
    ++pos_;
    while (IsOp(".")) {
      ++pos_;
      if (Cur().type != TokenType::kName) return Error(Cur(), "expected name");
      f->name += "." + Cur().text;
      ++pos_;
    }
    f->args.push_back(std::move(node));
    if (IsOp("(")) RETURN_IF_ERROR(ParseCallArgs(f.get()));
    node = std::move(f);
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParseTest(ExprPtr node) {
  const SourcePos pos = Cur().pos;
  ++pos_;  // 'is'
  bool negated = false;
  if (IsName("not")) {
    negated = true;
    ++pos_;
  }
  if (Cur().type != TokenType::kName) return Error(Cur(), "expected test name");
  ExprPtr test = Node(Expr::Kind::kTest, pos);
  test->name = Cur().text;
  ++pos_;
  test->args.push_back(std::move(node));
  const Token& t = Cur();
  const bool arg_start = t.type == TokenType::kName || t.type == TokenType::kString ||
                         t.type == TokenType::kInteger || t.type == TokenType::kFloat ||
                         (t.type == TokenType::kOperator && (t.text == "[" || t.text == "{"));
  if (IsOp("(")) {
    RETURN_IF_ERROR(ParseCallArgs(test.get()));
  } else if (arg_start && !IsName("else") && !IsName("or") && !IsName("and")) {
    if (IsName("is")) return Error(Cur(), "You cannot chain multiple tests with is");
    ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
    ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
    test->args.push_back(std::move(arg));
  }
  if (!negated) return test;
  ExprPtr n = Node(Expr::Kind::kNot, pos);
  n->args.push_back(std::move(test));
  return n;
}

}  // namespace linfer::tokenizer::jinja
