// kiln: a tracing graph compiler for CPU tensor programs. The one public header.
#pragma once

#include "runtime/autograd.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/functional.h"
#include "runtime/indexing.h"
#include "runtime/loss.h"
#include "runtime/ops.h"
#include "runtime/optim.h"
#include "runtime/parallel.h"
#include "runtime/safetensors.h"
#include "runtime/scalar.h"
#include "runtime/tensor.h"
#include "frontend/compile.h"
#include "frontend/trace.h"
#include "ir/interpreter.h"
#include "passes/pass_manager.h"
