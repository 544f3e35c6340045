// Which part of a training step an op belongs to: the forward, the backward
// (the autograd engine running), or the optimizer's update. The tracer marks
// each node with the phase its op ran in, so that a traced training step's
// dumps show the boundaries (`phase backward` lines, docs/ir.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

enum class StepPhase : uint8_t { Forward, Backward, Update };

constexpr std::string_view step_phase_name(StepPhase p) {
  switch (p) {
  case StepPhase::Forward: return "forward";
  case StepPhase::Backward: return "backward";
  case StepPhase::Update: return "update";
  }
  return "?";
}

constexpr std::optional<StepPhase> step_phase_named(std::string_view name) {
  for (StepPhase p : {StepPhase::Forward, StepPhase::Backward, StepPhase::Update})
    if (step_phase_name(p) == name) return p;
  return std::nullopt;
}

namespace detail {

// The phase this thread runs in: Forward unless a scope below says otherwise.
inline thread_local StepPhase t_step_phase = StepPhase::Forward;
inline StepPhase current_step_phase() { return t_step_phase; }

// RAII: the engine's backward and the optimizers' step run in their phase.
class StepPhaseScope {
public:
  explicit StepPhaseScope(StepPhase p) : saved_(t_step_phase) { t_step_phase = p; }
  ~StepPhaseScope() { t_step_phase = saved_; }
  StepPhaseScope(const StepPhaseScope &) = delete;
  StepPhaseScope &operator=(const StepPhaseScope &) = delete;

private:
  StepPhase saved_;
};

} // namespace detail
} // namespace kiln
