#include "app/calibrate/least_squares.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tandem::app {
namespace {

double half_sum_of_squares(const std::vector<double>& r) {
  double sum = 0;
  for (double v : r) sum += v * v;
  return sum / 2;
}

}  // namespace

std::vector<double> solve_linear(std::vector<std::vector<double>> a, std::vector<double> b) {
  const size_t n = b.size();
  for (size_t col = 0; col < n; ++col) {
    size_t pivot = col;
    for (size_t row = col + 1; row < n; ++row) {
      if (std::abs(a[row][col]) > std::abs(a[pivot][col])) pivot = row;
    }
    if (std::abs(a[pivot][col]) < 1e-300) return {};
    std::swap(a[col], a[pivot]);
    std::swap(b[col], b[pivot]);
    for (size_t row = col + 1; row < n; ++row) {
      const double factor = a[row][col] / a[col][col];
      for (size_t k = col; k < n; ++k) a[row][k] -= factor * a[col][k];
      b[row] -= factor * b[col];
    }
  }
  std::vector<double> x(n);
  for (size_t i = n; i-- > 0;) {
    double sum = b[i];
    for (size_t k = i + 1; k < n; ++k) sum -= a[i][k] * x[k];
    x[i] = sum / a[i][i];
  }
  return x;
}

std::vector<std::vector<double>> forward_jacobian(const BatchResiduals& residuals, const std::vector<double>& x,
                                                  const std::vector<double>& r0, const std::vector<double>& lower,
                                                  const std::vector<double>& upper, double step) {
  const size_t n = x.size();
  std::vector<std::vector<double>> points;
  std::vector<double> steps(n);
  for (size_t j = 0; j < n; ++j) {
    std::vector<double> p = x;
    steps[j] = x[j] + step <= upper[j] || x[j] - step < lower[j] ? step : -step;
    p[j] += steps[j];
    points.push_back(std::move(p));
  }
  const std::vector<std::vector<double>> rs = residuals(points);
  std::vector<std::vector<double>> jacobian(r0.size(), std::vector<double>(n, 0.0));
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < r0.size(); ++i) jacobian[i][j] = (rs[j][i] - r0[i]) / steps[j];
  }
  return jacobian;
}

namespace {

// J^T r and J^T J of the residuals r at the current point.
void normal_equations(const std::vector<std::vector<double>>& jacobian, const std::vector<double>& r,
                      std::vector<double>& gradient, std::vector<std::vector<double>>& normal) {
  const size_t n = gradient.size();
  for (size_t a = 0; a < n; ++a) {
    gradient[a] = 0;
    for (size_t i = 0; i < r.size(); ++i) gradient[a] += jacobian[i][a] * r[i];
    for (size_t b = 0; b < n; ++b) {
      normal[a][b] = 0;
      for (size_t i = 0; i < r.size(); ++i) normal[a][b] += jacobian[i][a] * jacobian[i][b];
    }
  }
}

// The free variables: not held at a bound by a gradient pushing out of the box.
std::vector<size_t> free_variables(const std::vector<double>& x, const std::vector<double>& lower,
                                   const std::vector<double>& upper, const std::vector<double>& gradient,
                                   const std::vector<std::vector<double>>& normal) {
  std::vector<size_t> free;
  for (size_t j = 0; j < x.size(); ++j) {
    const bool at_lower = x[j] <= lower[j] && gradient[j] > 0;
    const bool at_upper = x[j] >= upper[j] && gradient[j] < 0;
    if (!at_lower && !at_upper && normal[j][j] > 0) free.push_back(j);
  }
  return free;
}

// The damped Gauss-Newton step of the free variables: (A + lambda diag A) step = -g; empty when
// the system is singular.
std::vector<double> damped_step(const std::vector<size_t>& free, const std::vector<double>& gradient,
                                const std::vector<std::vector<double>>& normal, double lambda) {
  std::vector<std::vector<double>> a(free.size(), std::vector<double>(free.size()));
  std::vector<double> b(free.size());
  for (size_t p = 0; p < free.size(); ++p) {
    for (size_t q = 0; q < free.size(); ++q) a[p][q] = normal[free[p]][free[q]];
    a[p][p] += lambda * normal[free[p]][free[p]];
    b[p] = -gradient[free[p]];
  }
  return solve_linear(a, b);
}

void check_start(const std::vector<double>& x0, const std::vector<double>& lower, const std::vector<double>& upper) {
  const size_t n = x0.size();
  if (lower.size() != n || upper.size() != n)
    fail(ErrorCode::kInvalidArgument, "least squares: bounds of another size");
  for (size_t j = 0; j < n; ++j) {
    if (!(lower[j] <= x0[j] && x0[j] <= upper[j])) {
      fail(ErrorCode::kInvalidArgument, "least squares: start {} of variable {} is outside [{}, {}]", x0[j], j,
           lower[j], upper[j]);
    }
  }
}

}  // namespace

LeastSquaresResult bounded_least_squares(const BatchResiduals& residuals, std::vector<double> x0,
                                         const std::vector<double>& lower, const std::vector<double>& upper,
                                         const LeastSquaresOptions& options) {
  check_start(x0, lower, upper);
  const size_t n = x0.size();
  LeastSquaresResult result;
  result.x = std::move(x0);
  std::vector<double> r = residuals({result.x}).front();
  result.evaluations = 1;
  result.cost = half_sum_of_squares(r);
  if (n == 0) {
    result.converged = true;
    return result;
  }
  double lambda = 1e-3;
  bool need_jacobian = true;
  std::vector<double> gradient(n);
  std::vector<std::vector<double>> normal(n, std::vector<double>(n));
  for (result.iterations = 0; result.iterations < options.max_iterations; ++result.iterations) {
    if (result.cost == 0) {
      result.converged = true;
      break;
    }
    if (need_jacobian) {
      normal_equations(forward_jacobian(residuals, result.x, r, lower, upper, options.difference_step), r, gradient,
                       normal);
      result.evaluations += static_cast<int>(n);
      need_jacobian = false;
    }
    const std::vector<size_t> free = free_variables(result.x, lower, upper, gradient, normal);
    if (free.empty()) {
      result.converged = true;
      break;
    }
    const std::vector<double> step = damped_step(free, gradient, normal, lambda);
    if (step.empty()) {
      lambda *= 10;
      continue;
    }
    std::vector<double> trial = result.x;
    double largest_step = 0;
    for (size_t p = 0; p < free.size(); ++p) {
      const size_t j = free[p];
      trial[j] = std::clamp(result.x[j] + step[p], lower[j], upper[j]);
      largest_step = std::max(largest_step, std::abs(trial[j] - result.x[j]));
    }
    if (largest_step < options.step_tolerance) {
      result.converged = true;
      break;
    }
    const std::vector<double> trial_r = residuals({trial}).front();
    ++result.evaluations;
    const double trial_cost = half_sum_of_squares(trial_r);
    if (trial_cost < result.cost) {
      const double drop = (result.cost - trial_cost) / result.cost;
      result.x = trial;
      r = trial_r;
      result.cost = trial_cost;
      lambda = std::max(lambda / 3, 1e-12);
      need_jacobian = true;
      if (options.progress) options.progress(result.iterations + 1, result.cost);
      if (drop < options.cost_tolerance) {
        result.converged = true;
        break;
      }
    } else {
      lambda *= 4;
      if (lambda > 1e12) {
        result.converged = true;  // no step lowers the cost: a minimum to the Jacobian's precision
        break;
      }
    }
  }
  return result;
}

}  // namespace tandem::app
