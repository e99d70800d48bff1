// SPDX-License-Identifier: MIT
// Files per MPI rank: this process's rank as its launcher gives it (launcher_rank(), read from the
// environment, so that it is known before MPI_Init) and a path with the rank in its name
// (rank_path(): "trace.json" -> "trace.rank3.json"). The tracer's files per rank use them
// (trace_path(), scripts/trace_merge.py merges them); so can any file written once per rank.
#ifndef CLBUF_DETAIL_RANK_FILES_HPP
#define CLBUF_DETAIL_RANK_FILES_HPP

#if defined(__unix__) || defined(__APPLE__)
#include <sys/stat.h>
#endif

#include <cstddef>
#include <cstdlib>
#include <string>

namespace clbuf {
namespace detail {

/// This process's rank as a launcher gives it to the processes it starts (Open MPI's
/// OMPI_COMM_WORLD_RANK, MPICH's and Slurm's PMI_RANK, Slurm's SLURM_PROCID), or -1 outside one:
/// read from the environment, so that a manager made before MPI_Init knows it. Not PMIX_RANK,
/// which a singleton MPI_Init (mpi4py imported by a program run alone) sets to 0.
inline int launcher_rank() noexcept {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    char* end = nullptr;
    const long rank = std::strtol(value, &end, 10);
    if (*end == '\0' && rank >= 0 && rank < 100000) return static_cast<int>(rank);
  }
  return -1;
}

/// True when `path` names an existing folder (its trace file cannot be written: the error says
/// so rather than a rank's name made from it).
inline bool names_a_folder(const std::string& path) noexcept {
  if (!path.empty() && path.back() == '/') return true;
#if defined(__unix__) || defined(__APPLE__)
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
#else
  return false;
#endif
}

/// `path` with ".rank<N>" before its file name's extension: "trace.json" -> "trace.rank3.json",
/// "out/trace" -> "out/trace.rank3"; a path that has it already stays as it is (the Options of
/// another manager passed on), and so does a folder.
inline std::string rank_path(const std::string& path, int rank) {
  if (names_a_folder(path)) return path;
  const std::size_t slash = path.find_last_of('/');
  const std::size_t dot = path.find_last_of('.');
  const bool extension =
      dot != std::string::npos && dot != 0 && (slash == std::string::npos || dot > slash + 1);
  const std::size_t at = extension ? dot : path.size();
  const std::string tag = ".rank" + std::to_string(rank);
  if (at >= tag.size() && path.compare(at - tag.size(), tag.size(), tag) == 0) return path;
  return path.substr(0, at) + tag + path.substr(at);
}

}  // namespace detail
}  // namespace clbuf

#endif  // CLBUF_DETAIL_RANK_FILES_HPP
