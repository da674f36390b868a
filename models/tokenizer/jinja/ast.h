// Syntax tree of a parsed template: expression and statement nodes, as jinja2.nodes defines them
// (only the parts chat templates can use).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/tokenizer/jinja/lexer.h"
#include "models/tokenizer/jinja/value.h"

namespace linfer::tokenizer::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kConst,     // literal
    kName,      // name
    kList,      // args: items
    kTuple,     // args: items
    kDict,      // args: key, value, key, value, ...
    kGetattr,   // args[0].name
    kGetitem,   // args[0][args[1]]
    kSlice,     // args: start, stop, step (each may be null)
    kCall,      // args[0](args[1:], kwargs)
    kFilter,    // args[0] | name(args[1:], kwargs); args[0] null in {% filter %} blocks
    kTest,      // args[0] is name(args[1:], kwargs)
    kNot,       // not args[0]
    kNeg,       // -args[0]
    kPos,       // +args[0]
    kBinary,    // args[0] <name> args[1]: + - * / // % **
    kAnd,       // args[0] and args[1]
    kOr,        // args[0] or args[1]
    kConcat,    // args joined with ~
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...
    kCondExpr,  // args[1] if args[0] else args[2] (args[2] may be null)
  };

  Kind kind;
  SourcePos pos;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare: "==", "!=", "<", "<=", ">", ">=", "in", "notin"

  Expr() = default;
  Expr(Expr&&) = default;
  Expr& operator=(Expr&&) = default;
  // Frees the subtree without recursing: a chain of a million `or`s (or filters, or `[0]`s)
  // parses in loops, not calls, and must be freed the same way.
  ~Expr() {
    std::vector<ExprPtr> pending;
    const auto take = [&pending](Expr& e) {
      for (ExprPtr& a : e.args) {
        if (a) pending.push_back(std::move(a));
      }
      for (auto& kv : e.kwargs) {
        if (kv.second) pending.push_back(std::move(kv.second));
      }
    };
    take(*this);
    while (!pending.empty()) {
      ExprPtr e = std::move(pending.back());
      pending.pop_back();
      take(*e);
    }  // each `e` goes with its children taken: one level deep
  }
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// A macro's (or call block's) parameters: names, and defaults for the last ones.
struct Signature {
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // aligned to the end of `params`
};

struct Stmt {
  enum class Kind {
    kData,         // text
    kPrint,        // {{ expr }}
    kIf,           // tests[i] -> bodies[i]; else_body
    kFor,          // for target in expr [if test] body [else else_body]
    kSet,          // set target = expr
    kSetBlock,     // set target [| filter] ... endset
    kMacro,        // macro name(signature) body
    kCallBlock,    // call[(signature)] expr ... endcall
    kFilterBlock,  // filter f ... endfilter
    kWith,         // with a = x, b = y ... endwith
    kBreak,
    kContinue,
    kGeneration,  // transformers' {% generation %} ... {% endgeneration %}: renders its body
  };

  Kind kind;
  SourcePos pos;
  std::string text;  // kData; macro name
  ExprPtr target;    // kFor, kSet, kSetBlock: kName, kTuple of kName, or kGetattr (ns.attr)
  ExprPtr expr;      // value, iterable, call or filter
  ExprPtr test;      // kFor's `if` filter
  std::vector<ExprPtr> tests;  // kIf
  std::vector<Body> bodies;    // kIf
  Body body;
  Body else_body;
  Signature signature;
  std::vector<ExprPtr> targets;  // kWith
  std::vector<ExprPtr> values;   // kWith
};

}  // namespace linfer::tokenizer::jinja
