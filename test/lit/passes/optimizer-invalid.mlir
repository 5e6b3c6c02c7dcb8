// gpipe-optimizer errors: an unknown optimizer name, and hyper-parameters the
// update ops' verifiers reject (reported at the nn.param_grad they replace).
// RUN: not gpipe-opt %s --gpipe-optimizer="optimizer=rmsprop" 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not gpipe-opt %s --gpipe-optimizer="nesterov=true" 2>&1 | FileCheck %s --check-prefix=NESTEROV
// RUN: not gpipe-opt %s --gpipe-optimizer="optimizer=sgd momentum=-0.9" 2>&1 | FileCheck %s --check-prefix=MOMENTUM
// RUN: not gpipe-opt %s --gpipe-optimizer="optimizer=adam lr=-1" 2>&1 | FileCheck %s --check-prefix=LR
// RUN: not gpipe-opt %s --gpipe-optimizer="optimizer=adamw beta2=1" 2>&1 | FileCheck %s --check-prefix=BETA2

nn.parameter @w : tensor<4x8xf32>
// Unknown optimizer: reported on the function.
// UNKNOWN: :[[@LINE+1]]:1: error: unknown optimizer 'rmsprop' (expected sgd, adam or adamw)
func.func @step(%g: tensor<4x8xf32>) {
  %w = nn.param @w : tensor<4x8xf32>
  // Nesterov without momentum (torch.optim.SGD rejects it too).
  // NESTEROV: :[[@LINE+4]]:3: error: 'pipe.sgd_update' op nesterov requires a momentum > 0
  // MOMENTUM: :[[@LINE+3]]:3: error: 'pipe.sgd_update' op momentum = -9.000000e-01 is out of range [0.000000e+00, INF)
  // LR: :[[@LINE+2]]:3: error: 'pipe.adam_update' op lr = -1.000000e+00 is out of range [0.000000e+00, INF)
  // BETA2: :[[@LINE+1]]:3: error: 'pipe.adam_update' op beta2 = 1.000000e+00 is out of range [0.000000e+00, 1.000000e+00)
  nn.param_grad %w, %g : tensor<4x8xf32>
  return
}
