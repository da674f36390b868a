// Structured output's numeric bounds (json_bounds.h): bounded integers and numbers are written
// exactly within their bounds — as the double a reader makes of a number — with no dead end.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/structured/json_grammar.h"
#include "tests/engine/structured_testing.h"

namespace linfer::structured {
namespace {

// Bounded integers: exactly the integers within the bounds (never "-0", leading zeros or 17
// digits), and no prefix the matcher takes is a dead end (RandomDocument fails on one).
TEST(JsonMatcherTest, BoundedIntegersAreExactlyTheirRange) {
  struct Case {
    const char* schema;
    int64_t lo, hi;
  };
  for (const Case& c : {Case{R"({"type":"integer","minimum":-25,"maximum":130})", -25, 130},
                        Case{R"({"type":"integer","exclusiveMinimum":-3.5,"maximum":0})", -3, 0},
                        Case{R"({"type":"integer","minimum":7,"exclusiveMinimum":true,
                                 "maximum":9.99})",
                             8, 9},
                        Case{R"({"type":"integer","minimum":-1e30,"exclusiveMaximum":-98})",
                             -kMaxIntegerMagnitude, -99},
                        Case{R"({"type":"integer","minimum":100,"maximum":100})", 100, 100}}) {
    SCOPED_TRACE(c.schema);
    auto g = Compile(c.schema);
    ASSERT_TRUE(g);
    for (int64_t k = -400; k <= 400; ++k) {
      EXPECT_EQ(Accepts(*g, std::to_string(k)), k >= c.lo && k <= c.hi) << k;
    }
    for (int64_t k : {c.lo, c.hi, c.lo - 1, c.hi + 1}) {
      EXPECT_EQ(Accepts(*g, std::to_string(k)), k >= c.lo && k <= c.hi) << k;
    }
    EXPECT_FALSE(Accepts(*g, "-0"));
    EXPECT_FALSE(Accepts(*g, "0100"));
    EXPECT_FALSE(Accepts(*g, "-12345678901234567"));
    std::mt19937 rng(11);
    for (int i = 0; i < 200; ++i) {
      const std::string doc = RandomDocument(*g, rng);
      ASSERT_FALSE(doc.empty());
      const int64_t v = std::stoll(doc);
      EXPECT_TRUE(v >= c.lo && v <= c.hi) << doc;
    }
  }
}

// Bounded numbers: every decimal the matcher writes lies within the bounds exactly and as the
// double a reader makes of it; every decimal within them (up to 16 digits each side) is written;
// no exponent, no dead end.
TEST(JsonMatcherTest, BoundedNumbersAreExactlyTheirRange) {
  struct Case {
    const char* schema;
    double lo, hi;
    bool lo_open, hi_open;
  };
  for (const Case& c :
       {Case{R"({"type":"number","minimum":-1.25,"maximum":3})", -1.25, 3, false, false},
        Case{R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1})", 0, 1, true, true},
        Case{R"({"type":"number","minimum":0.1,"maximum":0.3})", 0.1, 0.3, false, false},
        Case{R"({"minimum":-7,"exclusiveMinimum":true,"maximum":-6.5})", -7, -6.5, true, false},
        Case{R"({"type":"number","exclusiveMinimum":1})", 1, 1e300, true, false}}) {
    SCOPED_TRACE(c.schema);
    auto g = Compile(c.schema);
    ASSERT_TRUE(g);
    auto within = [&](double x) {
      return (c.lo_open ? x > c.lo : x >= c.lo) && (c.hi_open ? x < c.hi : x <= c.hi);
    };
    // Decimals of up to two fraction digits in [-9, 9]: written exactly when within.
    for (int k = -900; k <= 900; ++k) {
      const std::string text = absl::StrCat(k < 0 ? "-" : "", std::abs(k) / 100, ".",
                                            std::abs(k) / 10 % 10, std::abs(k) % 10);
      EXPECT_EQ(Accepts(*g, text), within(std::stod(text))) << text;
    }
    EXPECT_FALSE(Accepts(*g, "1e0"));
    std::mt19937 rng(13);
    for (int i = 0; i < 300; ++i) {
      const std::string doc = RandomDocument(*g, rng, 60);
      ASSERT_FALSE(doc.empty());
      EXPECT_TRUE(within(std::stod(doc))) << doc;
    }
  }
  // Right at a bound, to the last of 16 fraction digits: written exactly when the double a reader
  // makes of it (strtod) is within, for minimum, maximum and both exclusive forms.
  for (const double b : {0.1, 0.3, 1.0 / 3, 2.5, 1e-5, 123.456, -0.7, 899.999999999}) {
    const std::string at = absl::StrFormat("%.16f", b);  // the decimal nearest b, 16 digits
    const bool negative = at[0] == '-';
    // Its fraction digits as one integer with the whole part: units of 10^-16, moved by k.
    std::string digits = at.substr(negative ? 1 : 0);
    digits.erase(digits.find('.'), 1);
    const long long units = std::stoll(digits) * (negative ? -1 : 1);
    for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      auto g = Compile(absl::StrFormat(R"({"type":"number","%s":%.17g})", key, b));
      ASSERT_TRUE(g);
      for (long long k = -3; k <= 3; ++k) {
        const long long u = units + k;
        const std::string text =
            absl::StrFormat("%s%lld.%016lld", u < 0 ? "-" : "", std::llabs(u) / 10000000000000000LL,
                            std::llabs(u) % 10000000000000000LL);
        const double x = std::stod(text);
        const std::string k2 = key;
        const bool want = k2 == "minimum"            ? x >= b
                          : k2 == "maximum"          ? x <= b
                          : k2 == "exclusiveMinimum" ? x > b
                                                     : x < b;
        EXPECT_EQ(Accepts(*g, text), want) << key << " " << b << ": " << text;
      }
    }
  }
  // Exclusive bounds hold after a reader's rounding: 1.0000000000000001 reads as 1.
  auto g = Compile(R"({"type":"number","exclusiveMinimum":1,"exclusiveMaximum":2})");
  EXPECT_FALSE(Accepts(*g, "1.0000000000000001"));
  EXPECT_TRUE(Accepts(*g, "1.0000000000000003"));
  EXPECT_FALSE(Accepts(*g, "1.9999999999999999"));
  EXPECT_TRUE(Accepts(*g, "1.9999999999999997"));
  // Inclusive bounds take the decimal as written: 0.1 itself, not 0.1000000000000001.
  g = Compile(R"({"type":"number","maximum":0.1})");
  EXPECT_TRUE(Accepts(*g, "0.1"));
  EXPECT_TRUE(Accepts(*g, "0.1000000000000000"));
  EXPECT_FALSE(Accepts(*g, "0.1000000000000001"));
  EXPECT_TRUE(Accepts(*g, "-9007199254740992.0000000000000000"));
  EXPECT_FALSE(Accepts(*g, "-9007199254740993"));
  // Beyond 2^53 a reader may take an integer exactly or as a double: nothing is written there.
  g = Compile(R"({"type":"number","maximum":9007199254740992})");
  EXPECT_TRUE(Accepts(*g, "9007199254740992"));
  EXPECT_FALSE(Accepts(*g, "9007199254740993"));
  EXPECT_FALSE(Accepts(*g, "9007199254740992.5"));
  EXPECT_EQ(CompileError(R"({"type":"number","minimum":9007199254740993})"),
            "schema: no number within ±2^53 of at most 16 fraction digits lies within its "
            "minimum/maximum");
  g = Compile(R"({"type":"number","minimum":-9007199254740993,"maximum":18446744073709551615})");
  EXPECT_TRUE(Accepts(*g, "-9007199254740992"));
  EXPECT_FALSE(Accepts(*g, "-9007199254740993"));
  // Type lists: ["integer","number"] is the number; an empty integer leaves the rest.
  g = Compile(R"({"type":["integer","number"],"minimum":0.5,"maximum":0.7})");
  EXPECT_TRUE(Accepts(*g, "0.6"));
  EXPECT_FALSE(Accepts(*g, "1"));
  // Only integers lie beyond 2^53: the number type goes, not the integer one.
  g = Compile(R"({"type":["integer","number","null"],"minimum":9007199254740993})");
  EXPECT_TRUE(Accepts(*g, "9007199254740993"));
  EXPECT_TRUE(Accepts(*g, "null"));
  g = Compile(R"({"type":["integer","string"],"minimum":0.5,"maximum":0.7})");
  EXPECT_TRUE(Accepts(*g, "\"x\""));
  EXPECT_FALSE(Accepts(*g, "0"));
}

}  // namespace
}  // namespace linfer::structured
