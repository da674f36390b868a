// Numeric bounds: integers by their floor and ceiling, numbers by the exact midpoints between a
// bound and its neighbouring doubles (what a reader's round-half-even strtod keeps within it).
#include "engine/structured/json_bounds.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace linfer::structured {
namespace {

using Json = nlohmann::ordered_json;

absl::Status Invalid(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

const Json* Member(const Json& s, const char* key) {
  auto it = s.find(key);
  return it == s.end() ? nullptr : &*it;
}

// One of minimum, maximum, exclusiveMinimum, exclusiveMaximum: a number.
struct Bound {
  const Json* value;
  bool lower, exclusive;
};

// The bounds `s` gives (draft 4's boolean exclusiveMinimum / exclusiveMaximum make minimum /
// maximum exclusive).
absl::StatusOr<std::vector<Bound>> Bounds(const Json& s, const std::string& path) {
  bool below_exclusive = false, above_exclusive = false;
  for (const auto& [key, base, exclusive] :
       {std::tuple{"exclusiveMinimum", "minimum", &below_exclusive},
        std::tuple{"exclusiveMaximum", "maximum", &above_exclusive}}) {
    if (const Json* v = Member(s, key); v && v->is_boolean()) {
      if (v->get<bool>() && !Member(s, base)) {
        return Invalid(absl::StrCat(path, ".", key), absl::StrCat("true needs ", base));
      }
      *exclusive = v->get<bool>();
    }
  }
  std::vector<Bound> out;
  for (const auto& [key, lower, exclusive] :
       {std::tuple{"minimum", true, below_exclusive}, std::tuple{"maximum", false, above_exclusive},
        std::tuple{"exclusiveMinimum", true, true}, std::tuple{"exclusiveMaximum", false, true}}) {
    const Json* v = Member(s, key);
    if (v == nullptr || (v->is_boolean() && std::string(key).starts_with("exclusive"))) continue;
    if (!v->is_number()) return Invalid(absl::StrCat(path, ".", key), "expected a number");
    out.push_back({v, lower, exclusive});
  }
  return out;
}

// floor((d + its neighbour toward `toward`) / 2 · 10^16) exactly, whether that is an integer,
// and whether d's mantissa is even (the midpoint then rounds to d). Each double is m · 2^e (m a
// 53-bit integer); the two share an exponent but for a power of two or zero, so their sum over
// the smaller exponent fits 55 bits, and times 5^16 (2^38) an __int128.
NumberUnits FloorUnitsOfMidpoint(double d, double toward, bool* integral, bool* even) {
  auto split = [](double x, int64_t* m, int* e) {
    *e = 0;
    const double fraction = std::frexp(x, e);  // x = fraction · 2^e, |fraction| in [0.5, 1)
    *m = static_cast<int64_t>(std::ldexp(fraction, 53));  // exact
    *e -= 53;
  };
  int64_t md = 0, mn = 0;
  int ed = 0, en = 0;
  split(d, &md, &ed);
  split(std::nextafter(d, toward), &mn, &en);
  *even = md % 2 == 0;
  if (md == 0) ed = en;  // zero: any exponent
  if (mn == 0) en = ed;
  const int e = std::min(ed, en);
  const NumberUnits sum = (NumberUnits{md} << (ed - e)) + (NumberUnits{mn} << (en - e));
  // midpoint · 10^16 = sum · 5^16 · 2^(e − 1 + 16)
  const NumberUnits x = sum * NumberUnits{152'587'890'625};  // 5^16
  const int shift = e - 1 + 16;
  if (shift >= 0) {
    *integral = true;
    return x << shift;  // below 10^32: |d| < 10^16
  }
  if (-shift >= 120) {  // |x| < 2^93: the quotient is 0 (or −1), with a remainder unless x = 0
    *integral = x == 0;
    return x < 0 ? -1 : 0;
  }
  const NumberUnits q = x >> -shift;  // arithmetic: rounds toward −∞
  *integral = (q << -shift) == x;
  return q;
}

// The first decimal (in units) that reads as a double ≥ d: past the midpoint of d and the double
// below it, or at it when it rounds to d (to even: d's last mantissa bit is 0).
NumberUnits ReadsAtLeast(double d) {
  if (d >= 1e16) return kMaxNumberUnits + 1;
  if (d <= -1e16) return -kMaxNumberUnits;
  bool integral = false, even = false;
  const NumberUnits f =
      FloorUnitsOfMidpoint(d, -std::numeric_limits<double>::infinity(), &integral, &even);
  return integral && even ? f : f + 1;
}

// The last decimal (in units) that reads as a double ≤ d.
NumberUnits ReadsAtMost(double d) {
  if (d >= 1e16) return kMaxNumberUnits;
  if (d <= -1e16) return -kMaxNumberUnits - 1;
  bool integral = false, even = false;
  const NumberUnits f =
      FloorUnitsOfMidpoint(d, std::numeric_limits<double>::infinity(), &integral, &even);
  return integral && !even ? f - 1 : f;
}

}  // namespace

// The first of minimum, maximum, exclusiveMinimum and exclusiveMaximum that `s` has, or null.
const char* FirstBound(const Json& s) {
  for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
    if (Member(s, key)) return key;
  }
  return nullptr;
}

absl::Status CheckBounds(const Json& s, const std::string& path) {
  return Bounds(s, path).status();
}

// An integer schema's bounds as the integers [lo, hi] they admit, clamped to what the matcher
// writes (±kMaxIntegerMagnitude, 16 digits); refused when no such integer is left.
absl::StatusOr<std::pair<int64_t, int64_t>> IntegerBounds(const Json& s, const std::string& path) {
  constexpr int64_t kMax = kMaxIntegerMagnitude;
  int64_t lo = -kMax, hi = kMax;
  // A bound as a double's floor or ceiling, saturated beyond the 16 digits (±(kMax + 1)).
  auto rounded = [&](const Json& v, bool up) -> int64_t {
    if (v.is_number_unsigned()) return std::min<uint64_t>(v.get<uint64_t>(), kMax + 1);
    if (v.is_number_integer()) return std::clamp<int64_t>(v.get<int64_t>(), -kMax - 1, kMax + 1);
    const double d = up ? std::ceil(v.get<double>()) : std::floor(v.get<double>());
    if (d >= 1e16) return kMax + 1;
    if (d <= -1e16) return -kMax - 1;
    return static_cast<int64_t>(d);
  };
  ASSIGN_OR_RETURN(std::vector<Bound> bounds, Bounds(s, path));
  for (const Bound& b : bounds) {
    if (b.lower) {
      lo = std::max(lo, b.exclusive ? rounded(*b.value, false) + 1 : rounded(*b.value, true));
    } else {
      hi = std::min(hi, b.exclusive ? rounded(*b.value, true) - 1 : rounded(*b.value, false));
    }
  }
  if (lo > hi || lo > kMax || hi < -kMax) {
    return Invalid(path, "no integer of at most 16 digits lies within its minimum/maximum");
  }
  return std::make_pair(lo, hi);
}

// A number schema's bounds in units of 10^-16 (NumberUnits), as a reader checks them: a
// written decimal is within when the double it reads as is (minimum 0.1 admits "0.1", whose
// decimal value lies just below the double 0.1). What is written stays within ±2^53, where a
// reader that takes "9007199254740993" as an exact integer and one that takes it as a double
// agree; refused when no number is left.
absl::StatusOr<std::pair<NumberUnits, NumberUnits>> NumberBounds(const Json& s,
                                                                 const std::string& path) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  constexpr int64_t kExact = int64_t{1} << 53;
  NumberUnits lo = -kMaxExactNumberUnits, hi = kMaxExactNumberUnits;
  ASSIGN_OR_RETURN(std::vector<Bound> bounds, Bounds(s, path));
  for (const Bound& b : bounds) {
    double d = b.value->get<double>();
    // An integer bound a double cannot hold: beyond what is written, whichever side it is on.
    if ((b.value->is_number_unsigned() && b.value->get<uint64_t>() > uint64_t{kExact}) ||
        (b.value->is_number_integer() && !b.value->is_number_unsigned() &&
         (b.value->get<int64_t>() > kExact || b.value->get<int64_t>() < -kExact))) {
      d = d > 0 ? 1e300 : -1e300;
    }
    // Past an exclusive bound: at or past the next double beyond it.
    if (b.exclusive) d = std::nextafter(d, b.lower ? kInf : -kInf);
    if (b.lower) {
      lo = std::max(lo, ReadsAtLeast(d));
    } else {
      hi = std::min(hi, ReadsAtMost(d));
    }
  }
  lo = std::max(lo, -kMaxExactNumberUnits);
  hi = std::min(hi, kMaxExactNumberUnits);
  if (lo > hi) {
    return Invalid(path,
                   "no number within ±2^53 of at most 16 fraction digits lies within its "
                   "minimum/maximum");
  }
  return std::make_pair(lo, hi);
}

}  // namespace linfer::structured
