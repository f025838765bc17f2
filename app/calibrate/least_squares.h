// Bounded nonlinear least squares, small and dense: minimise 1/2 sum r_i(x)^2 subject to
// lower <= x <= upper, by a projected Levenberg-Marquardt method with a forward-difference
// Jacobian. Written for `tandem calibrate` (a handful of parameters, residuals from the simulator),
// where each evaluation is expensive, so the caller evaluates a batch of points at once (the
// Jacobian's columns in parallel processes).
//
// Method: at x with residuals r and Jacobian J, the free variables (those not at a bound with the
// gradient pushing outwards) take the step (J^T J + lambda diag(J^T J)) d = -J^T r, the result is
// clipped into the box; a step that lowers the cost is taken and lambda shrinks, else lambda grows
// and the step is tried again. Stops when the cost or the step stops changing, or after
// max_iterations.
#pragma once

#include <functional>
#include <vector>

namespace tandem::app {

// Residuals at each of `points` (each a full x), in order.
using BatchResiduals = std::function<std::vector<std::vector<double>>(const std::vector<std::vector<double>>& points)>;

struct LeastSquaresOptions {
  int max_iterations = 50;
  double difference_step = 1e-4;  // forward-difference step in x's units
  double cost_tolerance = 1e-12;  // stop when the cost falls by less than this (relative)
  double step_tolerance = 1e-9;   // stop when no component of the step exceeds this
  // Called after each iteration with (iteration, cost): progress for long fits.
  std::function<void(int, double)> progress;
};

struct LeastSquaresResult {
  std::vector<double> x;
  double cost = 0;  // 1/2 sum r^2 at x
  int iterations = 0;
  int evaluations = 0;     // points evaluated in all
  bool converged = false;  // a tolerance was met (not max_iterations)
};

// Requires lower <= x0 <= upper, all the same size. Throws Error(kInvalidArgument) otherwise.
LeastSquaresResult bounded_least_squares(const BatchResiduals& residuals, std::vector<double> x0,
                                         const std::vector<double>& lower, const std::vector<double>& upper,
                                         const LeastSquaresOptions& options = {});

// The forward-difference Jacobian at x (rows: residuals, columns: variables) from residuals r0 at
// x: column j steps x_j by +step, or -step where +step would leave the box (and -step would not).
std::vector<std::vector<double>> forward_jacobian(const BatchResiduals& residuals, const std::vector<double>& x,
                                                  const std::vector<double>& r0, const std::vector<double>& lower,
                                                  const std::vector<double>& upper, double step);

// Solves the n x n system a x = b (row-major, a copy) by Gaussian elimination with partial
// pivoting; nullopt-like empty vector when a is singular.
std::vector<double> solve_linear(std::vector<std::vector<double>> a, std::vector<double> b);

}  // namespace tandem::app
