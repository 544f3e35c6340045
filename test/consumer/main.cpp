// Prints the transpose of a 2x3 tensor's element [2][1] computed through kiln's views: expect 5.
#include <iostream>

#include <kiln/kiln.h>

int main() {
  kiln::Tensor t = kiln::arange(6, kiln::kFloat32).view({2, 3});
  std::cout << t.t()[2][1].item<float>() << "\n";
  return 0;
}
