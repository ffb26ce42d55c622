// The TODO marker of every exercise stub.
//
//   void broadcast_ring(std::span<float> buf, int src) {
//     DISTLAB_TODO("pass buf around the ring: receive from the left, send to the right");
//   }
//
// Calling a stub throws distlab::NotImplemented("not implemented: <what to do> (file:line)"),
// so a test of an unfinished function fails with a message that says what to write.
#pragma once

#include <stdexcept>
#include <string>

#include "dist/dist.hpp"

namespace distlab {

/// A std::logic_error; dist::launch rethrows it with the rank in front, keeping its type.
struct NotImplemented : dist::RankError<NotImplemented, std::logic_error> {
  using RankError::RankError;
};

[[noreturn]] void throw_not_implemented(const char* what, const char* file, int line);

}  // namespace distlab

#define DISTLAB_TODO(what) ::distlab::throw_not_implemented((what), __FILE__, __LINE__)
