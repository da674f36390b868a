// The recursive-descent parser shared by parser.cc (statements) and parser_expr.cc
// (expressions). Internal to the jinja engine.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/tokenizer/jinja/ast.h"

namespace linfer::tokenizer::jinja {

enum class TupleMode { kFull, kNoCondExpr, kSimplified };

class Parser {
 public:
  Parser(std::vector<Token> tokens, int max_depth)
      : tokens_(std::move(tokens)), max_depth_(max_depth) {}

  // Parses until EOF or a block tag whose name is one of `end_tags` (left as the current token).
  absl::StatusOr<Body> Subparse(const std::vector<absl::string_view>& end_tags);

 private:
  const Token& Cur() const { return tokens_[pos_]; }
  const Token& Peek(size_t n) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  bool IsOp(absl::string_view op) const {
    return Cur().type == TokenType::kOperator && Cur().text == op;
  }
  bool IsName(absl::string_view name) const {
    return Cur().type == TokenType::kName && Cur().text == name;
  }
  absl::Status Error(const Token& at, absl::string_view msg) const;
  absl::Status Expect(TokenType type, absl::string_view text, absl::string_view what);
  static std::string Describe(const Token& t);
  absl::Status Enter();  // nesting guard; callers decrement depth_ on success
  ExprPtr Node(Expr::Kind kind, SourcePos pos) const;

  // Statements (parser.cc).
  absl::StatusOr<Body> ParseBody(const std::vector<absl::string_view>& end_tags);
  absl::StatusOr<Body> ParseBodyUntil(absl::string_view end_tag);
  absl::StatusOr<StmtPtr> ParseStatement();
  absl::StatusOr<StmtPtr> ParseIf(StmtPtr s);
  absl::StatusOr<StmtPtr> ParseFor(StmtPtr s);
  absl::StatusOr<StmtPtr> ParseSet(StmtPtr s);
  absl::StatusOr<StmtPtr> ParseMacroOrCall(StmtPtr s, bool is_macro);
  absl::StatusOr<StmtPtr> ParseWith(StmtPtr s);
  absl::Status ParseSignature(Signature* sig);
  absl::StatusOr<ExprPtr> ParseAssignTarget(const std::vector<absl::string_view>& extra_end);

  // Expressions (parser_expr.cc), by decreasing precedence level.
  absl::StatusOr<ExprPtr> ParseTuple(TupleMode mode,
                                     const std::vector<absl::string_view>& extra_end);
  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr);
  absl::StatusOr<ExprPtr> ParseCondExpr();
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  absl::StatusOr<ExprPtr> ParseMath1();
  absl::StatusOr<ExprPtr> ParseConcat();
  absl::StatusOr<ExprPtr> ParseMath2();
  absl::StatusOr<ExprPtr> ParsePow();
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);
  absl::StatusOr<ExprPtr> ParsePrimary();
  absl::StatusOr<ExprPtr> ParseListOrDict(bool is_dict);
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscribed();
  absl::Status ParseCallArgs(Expr* node);
  absl::StatusOr<ExprPtr> ParseFilterChain(ExprPtr node, bool start_inline);
  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node);

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int max_depth_;
  int loop_depth_ = 0;
};

}  // namespace linfer::tokenizer::jinja
