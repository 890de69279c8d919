// all.cu — the one translation unit build.sh compiles to PTX (and hostcheck
// compiles with g++): every kernel of kernels.h.
#include "elementwise.cu"
#include "conv.cu"
#include "batchnorm.cu"
#include "pool.cu"
#include "softmax.cu"
#include "classifier.cu"
#include "attention.cu"
#include "optim.cu"
#include "data.cu"
