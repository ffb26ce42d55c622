// The Open MPI backend's groups: one communicator per group (see mpi_backend.hpp).
#include <cstdint>

#include "mpi_backend.hpp"

namespace dist::detail::mpi {

// new_group: MPI_Comm_split of the world (every rank calls it; non-members pass MPI_UNDEFINED),
// after an all-gather of a hash of the list so that different lists are a MismatchError.
std::shared_ptr<const GroupInfo> MpiBackend::new_group(const std::vector<int>& ranks,
                                                       const std::string& name) {
  job_.poll_failures();
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the list
  for (int w : ranks) h = (h ^ static_cast<std::uint32_t>(w)) * 1099511628211ull;
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size()));
  DIST_MPI_CHECK(MPI_Allgather(&h, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, job_.comm()));
  for (int q = 0; q < size(); ++q) {
    if (all[static_cast<std::size_t>(q)] != all[0]) {
      throw MismatchError("rank " + std::to_string(rank()) + ": new_group: rank 0 and rank " +
                          std::to_string(q) +
                          " passed different lists of ranks; every rank must pass the same "
                          "list (collective call)");
    }
  }
  int index = -1;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == rank()) index = static_cast<int>(i);
  }
  MPI_Comm c = MPI_COMM_NULL;
  DIST_MPI_CHECK(
      MPI_Comm_split(job_.comm(), index >= 0 ? 0 : MPI_UNDEFINED, index >= 0 ? index : 0, &c));
  return describe_group(c, ranks, name);
}

// split: MPI_Comm_split of the parent's communicator (same colour/key semantics).
std::shared_ptr<const GroupInfo> MpiBackend::split(int color, int key, const Group& parent,
                                                   const std::string& name) {
  job_.poll_failures();
  MPI_Comm c = MPI_COMM_NULL;
  DIST_MPI_CHECK(MPI_Comm_split(comm(parent), color >= 0 ? color : MPI_UNDEFINED, key, &c));
  std::vector<int> ranks;
  if (c != MPI_COMM_NULL) {
    int n = 0;
    DIST_MPI_CHECK(MPI_Comm_size(c, &n));
    ranks.resize(static_cast<std::size_t>(n));
    const int me = rank();
    DIST_MPI_CHECK(MPI_Allgather(&me, 1, MPI_INT, ranks.data(), 1, MPI_INT, c));
  }
  return describe_group(c, ranks, name + (color >= 0 ? std::to_string(color) : "none"));
}

std::shared_ptr<const GroupInfo> MpiBackend::describe_group(MPI_Comm c,
                                                            const std::vector<int>& ranks,
                                                            const std::string& name) {
  auto info = std::make_shared<GroupInfo>();
  info->id = next_group_id_++;
  info->name = name;
  info->ranks = ranks;
  info->group_of.assign(static_cast<std::size_t>(size()), -1);
  for (std::size_t i = 0; i < ranks.size(); ++i)
    info->group_of[static_cast<std::size_t>(ranks[i])] = static_cast<int>(i);
  info->my_rank = info->group_of[static_cast<std::size_t>(rank())];
  info->owner = this;
  if (c != MPI_COMM_NULL) comms_[info->id] = c;
  return info;
}

}  // namespace dist::detail::mpi
