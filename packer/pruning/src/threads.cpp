// Thread counts of the libraries the pruning algorithms run on (pruning.h: set_threads).
#include <cblas.h>
#include <omp.h>

#include "endor/pruning.h"

namespace endor::pruning {

void set_threads(int n) {
  if (n <= 0) return;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

}  // namespace endor::pruning
