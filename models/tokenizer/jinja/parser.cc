// Statement parsing (see parser.h); expression parsing is in parser_expr.cc.
#include "models/tokenizer/jinja/parser.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/tokenizer/jinja/parser_internal.h"

namespace linfer::tokenizer::jinja {

absl::Status Parser::Error(const Token& at, absl::string_view msg) const {
  return absl::InvalidArgumentError(FormatError(at.pos, msg));
}

absl::Status Parser::Expect(TokenType type, absl::string_view text, absl::string_view what) {
  const Token& t = Cur();
  if (t.type != type || (!text.empty() && t.text != text)) {
    return Error(t, absl::StrCat("expected ", what, ", got ", Describe(t)));
  }
  ++pos_;
  return absl::OkStatus();
}

std::string Parser::Describe(const Token& t) {
  switch (t.type) {
    case TokenType::kEof:
      return "end of template";
    case TokenType::kBlockEnd:
      return "end of statement block";
    case TokenType::kVariableEnd:
      return "end of print statement";
    case TokenType::kData:
      return "template data";
    default:
      return absl::StrCat("'", t.text, "'");
  }
}

absl::Status Parser::Enter() {
  if (++depth_ > max_depth_) {
    return Error(Cur(), absl::StrCat("template nested deeper than ", max_depth_, " levels"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Body> Parser::Subparse(const std::vector<absl::string_view>& end_tags) {
  Body body;
  while (Cur().type != TokenType::kEof) {
    const Token& t = Cur();
    if (t.type == TokenType::kData) {
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kData;
      s->pos = t.pos;
      s->text = t.text;
      body.push_back(std::move(s));
      ++pos_;
    } else if (t.type == TokenType::kVariableBegin) {
      ++pos_;
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kPrint;
      s->pos = t.pos;
      ASSIGN_OR_RETURN(s->expr, ParseTuple(TupleMode::kFull, {}));
      RETURN_IF_ERROR(Expect(TokenType::kVariableEnd, "", "end of print statement"));
      body.push_back(std::move(s));
    } else if (t.type == TokenType::kBlockBegin) {
      ++pos_;
      for (absl::string_view end : end_tags) {
        if (IsName(end)) return body;
      }
      ASSIGN_OR_RETURN(StmtPtr s, ParseStatement());
      RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "", "end of statement block"));
      body.push_back(std::move(s));
    } else {
      return Error(t, absl::StrCat("unexpected ", Describe(t)));
    }
  }
  if (!end_tags.empty()) {
    std::vector<std::string> quoted;
    for (absl::string_view e : end_tags) quoted.push_back(absl::StrCat("'", e, "'"));
    return Error(Cur(), absl::StrCat("Unexpected end of template. Jinja was looking for the "
                                     "following tags: ",
                                     absl::StrJoin(quoted, " or "), "."));
  }
  return body;
}

absl::StatusOr<Body> Parser::ParseBody(const std::vector<absl::string_view>& end_tags) {
  RETURN_IF_ERROR(Enter());
  if (IsOp(":")) ++pos_;
  RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "", "end of statement block"));
  ASSIGN_OR_RETURN(Body body, Subparse(end_tags));
  --depth_;
  return body;
}

absl::StatusOr<Body> Parser::ParseBodyUntil(absl::string_view end_tag) {
  ASSIGN_OR_RETURN(Body body, ParseBody({end_tag}));
  ++pos_;  // the end tag's name
  return body;
}

absl::StatusOr<StmtPtr> Parser::ParseStatement() {
  const Token& t = Cur();
  if (t.type != TokenType::kName) return Error(t, "tag name expected");
  auto s = std::make_unique<Stmt>();
  s->pos = t.pos;
  const std::string tag = t.text;
  ++pos_;
  if (tag == "if") return ParseIf(std::move(s));
  if (tag == "for") return ParseFor(std::move(s));
  if (tag == "set") return ParseSet(std::move(s));
  if (tag == "macro" || tag == "call") return ParseMacroOrCall(std::move(s), tag == "macro");
  if (tag == "filter") {
    s->kind = Stmt::Kind::kFilterBlock;
    ASSIGN_OR_RETURN(s->expr, ParseFilterChain(nullptr, /*start_inline=*/true));
    ASSIGN_OR_RETURN(s->body, ParseBodyUntil("endfilter"));
    return s;
  }
  if (tag == "with") return ParseWith(std::move(s));
  if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) return Error(t, absl::StrCat("'", tag, "' outside loop"));
    s->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    return s;
  }
  if (tag == "generation") {
    s->kind = Stmt::Kind::kGeneration;
    ASSIGN_OR_RETURN(s->body, ParseBodyUntil("endgeneration"));
    return s;
  }
  if (tag == "print") {
    s->kind = Stmt::Kind::kPrint;
    ASSIGN_OR_RETURN(s->expr, ParseTuple(TupleMode::kFull, {}));
    return s;
  }
  if (tag == "extends" || tag == "include" || tag == "import" || tag == "from" || tag == "block" ||
      tag == "autoescape") {
    return Error(t, absl::StrCat("the '", tag, "' tag is not supported in chat templates"));
  }
  return Error(t, absl::StrCat("Encountered unknown tag '", tag, "'."));
}

absl::StatusOr<StmtPtr> Parser::ParseIf(StmtPtr s) {
  s->kind = Stmt::Kind::kIf;
  while (true) {
    ASSIGN_OR_RETURN(ExprPtr test, ParseTuple(TupleMode::kNoCondExpr, {}));
    ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}));
    s->tests.push_back(std::move(test));
    s->bodies.push_back(std::move(body));
    const std::string tag = Cur().text;
    ++pos_;
    if (tag == "elif") continue;
    if (tag == "else") {
      ASSIGN_OR_RETURN(s->else_body, ParseBodyUntil("endif"));
    }
    return s;
  }
}

absl::StatusOr<StmtPtr> Parser::ParseFor(StmtPtr s) {
  s->kind = Stmt::Kind::kFor;
  ASSIGN_OR_RETURN(s->target, ParseAssignTarget({"in"}));
  RETURN_IF_ERROR(Expect(TokenType::kName, "in", "'in'"));
  ASSIGN_OR_RETURN(s->expr, ParseTuple(TupleMode::kNoCondExpr, {"recursive"}));
  if (IsName("if")) {
    ++pos_;
    ASSIGN_OR_RETURN(s->test, ParseExpression(true));
  }
  if (IsName("recursive")) return Error(Cur(), "recursive loops are not supported");
  ++loop_depth_;
  ASSIGN_OR_RETURN(s->body, ParseBody({"endfor", "else"}));
  --loop_depth_;
  const std::string tag = Cur().text;
  ++pos_;
  if (tag == "else") {
    ASSIGN_OR_RETURN(s->else_body, ParseBodyUntil("endfor"));
  }
  return s;
}

absl::StatusOr<StmtPtr> Parser::ParseSet(StmtPtr s) {
  if (Cur().type == TokenType::kName && Peek(1).type == TokenType::kOperator &&
      Peek(1).text == "." && Peek(2).type == TokenType::kName) {
    auto ref = std::make_unique<Expr>();
    ref->kind = Expr::Kind::kGetattr;
    ref->pos = Cur().pos;
    auto base = std::make_unique<Expr>();
    base->kind = Expr::Kind::kName;
    base->pos = Cur().pos;
    base->name = Cur().text;
    ref->name = Peek(2).text;
    ref->args.push_back(std::move(base));
    pos_ += 3;
    s->target = std::move(ref);
  } else {
    ASSIGN_OR_RETURN(s->target, ParseAssignTarget({}));
  }
  if (IsOp("=")) {
    ++pos_;
    s->kind = Stmt::Kind::kSet;
    ASSIGN_OR_RETURN(s->expr, ParseTuple(TupleMode::kFull, {}));
    return s;
  }
  s->kind = Stmt::Kind::kSetBlock;
  if (IsOp("|")) {
    ASSIGN_OR_RETURN(s->expr, ParseFilterChain(nullptr, /*start_inline=*/false));
  }
  ASSIGN_OR_RETURN(s->body, ParseBodyUntil("endset"));
  return s;
}

absl::Status Parser::ParseSignature(Signature* sig) {
  RETURN_IF_ERROR(Expect(TokenType::kOperator, "(", "'('"));
  while (!IsOp(")")) {
    if (!sig->params.empty()) RETURN_IF_ERROR(Expect(TokenType::kOperator, ",", "','"));
    if (Cur().type != TokenType::kName) return Error(Cur(), "expected parameter name");
    sig->params.push_back(Cur().text);
    ++pos_;
    if (IsOp("=")) {
      ++pos_;
      ASSIGN_OR_RETURN(ExprPtr d, ParseExpression(true));
      sig->defaults.push_back(std::move(d));
    } else if (!sig->defaults.empty()) {
      return Error(Cur(), "non-default argument follows default argument");
    }
  }
  ++pos_;
  return absl::OkStatus();
}

absl::StatusOr<StmtPtr> Parser::ParseMacroOrCall(StmtPtr s, bool is_macro) {
  const int saved_loops = loop_depth_;
  loop_depth_ = 0;
  if (is_macro) {
    s->kind = Stmt::Kind::kMacro;
    if (Cur().type != TokenType::kName) return Error(Cur(), "expected macro name");
    s->text = Cur().text;
    ++pos_;
    RETURN_IF_ERROR(ParseSignature(&s->signature));
    ASSIGN_OR_RETURN(s->body, ParseBodyUntil("endmacro"));
  } else {
    s->kind = Stmt::Kind::kCallBlock;
    if (IsOp("(")) RETURN_IF_ERROR(ParseSignature(&s->signature));
    ASSIGN_OR_RETURN(s->expr, ParseExpression(true));
    if (s->expr->kind != Expr::Kind::kCall) return Error(Cur(), "expected call");
    ASSIGN_OR_RETURN(s->body, ParseBodyUntil("endcall"));
  }
  loop_depth_ = saved_loops;
  return s;
}

absl::StatusOr<StmtPtr> Parser::ParseWith(StmtPtr s) {
  s->kind = Stmt::Kind::kWith;
  while (Cur().type != TokenType::kBlockEnd) {
    if (!s->targets.empty()) RETURN_IF_ERROR(Expect(TokenType::kOperator, ",", "','"));
    ASSIGN_OR_RETURN(ExprPtr target, ParseAssignTarget({}));
    RETURN_IF_ERROR(Expect(TokenType::kOperator, "=", "'='"));
    ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
    s->targets.push_back(std::move(target));
    s->values.push_back(std::move(value));
  }
  ASSIGN_OR_RETURN(s->body, ParseBodyUntil("endwith"));
  return s;
}

absl::StatusOr<ExprPtr> Parser::ParseAssignTarget(const std::vector<absl::string_view>& extra_end) {
  ASSIGN_OR_RETURN(ExprPtr target, ParseTuple(TupleMode::kSimplified, extra_end));
  auto is_name = [](const Expr& e) { return e.kind == Expr::Kind::kName; };
  bool ok = is_name(*target);
  if (target->kind == Expr::Kind::kTuple) {
    ok = true;
    for (const ExprPtr& e : target->args) ok = ok && is_name(*e);
  }
  if (!ok) return Error(Cur(), "can't assign to this expression");
  return target;
}

absl::StatusOr<Body> ParseTemplate(absl::string_view source, int max_depth) {
  ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  Parser parser(std::move(tokens), max_depth);
  return parser.Subparse({});
}

}  // namespace linfer::tokenizer::jinja
