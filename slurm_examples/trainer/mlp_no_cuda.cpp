// The cuda engine in a build without CUDA (or without cuBLAS): --device cuda says why it cannot run.
#include "mlp.hpp"
#include "trainrt/error.hpp"

namespace train_mlp {

bool cuda_engine_built() { return false; }

std::unique_ptr<Engine> make_cuda_engine(trainrt::Runtime&, const Shapes&, std::uint64_t) {
  throw trainrt::Error("this train-mlp was built without CUDA and cuBLAS: use --device cpu, or rebuild with the CUDA toolkit",
                       "--device cuda");
}

}  // namespace train_mlp
