// SPDX-License-Identifier: MIT
// clbuf::mpi's non-blocking collectives (ibroadcast, iallreduce): MPI_Ibcast and MPI_Iallreduce
// on host memory (the buffer's own host block on a CPU device, else a host copy read at launch
// and written back at completion), after a non-blocking agreement of the arguments
// (MPI_Iallreduce), launched in call order by the Core (core.hpp's Collective).
#ifndef CLBUF_DETAIL_MPI_COLLECTIVE_HPP
#define CLBUF_DETAIL_MPI_COLLECTIVE_HPP

#include <mpi.h>
#include <clbuf/detail/mpi/core.hpp>
#include <clbuf/detail/mpi/streams.hpp>
#include <clbuf/detail/mpi/wire.hpp>
#include <clbuf/error.hpp>

#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace clbuf {
namespace mpi {
namespace detail {

class HostCollective final : public Collective {
 public:
  /// A broadcast from `root` (reduce: false) or an allreduce with `reduction` of `span`.
  /// `agreement` is null when the ranks do not agree first (Path::whole, verify_collectives
  /// false); `local` is this rank's own rejection of its arguments (reported after the
  /// agreement, so that the other ranks learn of it).
  HostCollective(Core& core, const char* operation, Span span, bool reduce, int root, Op reduction,
                 std::unique_ptr<Agreement> agreement, std::exception_ptr local)
      : Collective(operation),
        core_(core),
        span_(std::move(span)),
        reduce_(reduce),
        root_(root),
        reduction_(reduction),
        agreement_(std::move(agreement)),
        local_(std::move(local)) {
    core.make_room();  // queue_collective() and track() then need no memory
    if (agreement_) agreement_->start(operation, core.coll(), agree_request_);
  }

  ~HostCollective() override {
    // Only a failed collective gets here with MPI still owning memory: left to MPI (leaked).
    if ((agree_request_ != MPI_REQUEST_NULL || request_ != MPI_REQUEST_NULL) && !mpi_finalized()) {
      static_cast<void>(new std::vector<char>(std::move(copy_)));
      static_cast<void>(agreement_.release());
    }
  }

  bool launch(bool block) noexcept override {
    if (launched_) return true;
    try {
      if (agree_request_ != MPI_REQUEST_NULL) {
        int flag = 0;
        if (block) {
          check_mpi(MPI_Wait(&agree_request_, MPI_STATUS_IGNORE), operation_, "MPI_Wait");
        } else {
          check_mpi(MPI_Test(&agree_request_, &flag, MPI_STATUS_IGNORE), operation_, "MPI_Test");
          if (!flag) return false;
        }
      }
      launched_ = true;
      if (local_) std::rethrow_exception(local_);
      if (agreement_) agreement_->check(operation_);
      start();
    } catch (...) {
      launched_ = true;
      failure_ = std::current_exception();
    }
    return true;
  }

 private:
  bool advance() override {
    core_.launch_collectives(false);
    if (!launched_) return false;
    if (failure_) std::rethrow_exception(failure_);
    if (request_ != MPI_REQUEST_NULL) {
      int flag = 0;
      check_mpi(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), operation_, "MPI_Test");
      if (!flag) return false;
    }
    const bool written = reduce_ || core_.rank() != root_;
    if (written && !copy_.empty()) {
      core_.io().write(operation_, span_.buffer, span_.offset, span_.bytes, copy_.data(), true);
    }
    return true;
  }

  /// The MPI collective on the buffer's host block, or on a copy (read first where it is input).
  void start() {
    int count = 0;
    const MPI_Datatype type = whole_count(operation_, span_, count);
    const ChunkIo& io = core_.io();
    char* data = nullptr;
    if (span_.bytes != 0 && span_.host != nullptr) {
      io.finish(operation_);
      data = span_.host + span_.offset;
    } else if (span_.bytes != 0) {
      copy_.resize(span_.bytes);
      data = copy_.data();
      if (reduce_ || core_.rank() == root_) {
        io.read(operation_, span_.buffer, span_.offset, span_.bytes, data, true);
      }
    }
    if (reduce_) {
      check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data, count, type, mpi_op(reduction_), core_.coll(),
                               &request_),
                operation_, "MPI_Iallreduce");
    } else {
      check_mpi(MPI_Ibcast(data, count, type, root_, core_.coll(), &request_), operation_,
                "MPI_Ibcast");
    }
  }

  Core& core_;
  Span span_;
  bool reduce_;
  int root_;
  Op reduction_;
  std::unique_ptr<Agreement> agreement_;
  std::exception_ptr local_;
  std::exception_ptr failure_;
  MPI_Request agree_request_ = MPI_REQUEST_NULL;
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::vector<char> copy_;
  bool launched_ = false;
};

}  // namespace detail
}  // namespace mpi
}  // namespace clbuf

#endif  // CLBUF_DETAIL_MPI_COLLECTIVE_HPP
