// SPDX-License-Identifier: MIT
// clbuf: typed, checked, fast transfers between host memory and OpenCL devices.
// One include gives the whole library; the topic headers below hold one concern each.
#ifndef CLBUF_CLBUF_HPP
#define CLBUF_CLBUF_HPP

#include <clbuf/version.hpp>

// First: it checks for C++17 and the Khronos bindings, with one error naming what is missing.
#include <clbuf/opencl.hpp>

#ifndef CLBUF_DETAIL_CANNOT_COMPILE
#include <clbuf/buffer.hpp>
#include <clbuf/checkpoint.hpp>
#include <clbuf/device.hpp>
#include <clbuf/device_group.hpp>
#include <clbuf/device_info.hpp>
#include <clbuf/error.hpp>
#include <clbuf/future.hpp>
#include <clbuf/group_tile_stream.hpp>
#include <clbuf/kernel.hpp>
#include <clbuf/manager.hpp>
#include <clbuf/mapped_view.hpp>
#include <clbuf/npy.hpp>
#include <clbuf/options.hpp>
#include <clbuf/pinned.hpp>
#include <clbuf/pool.hpp>
#include <clbuf/rect.hpp>
#include <clbuf/sharded_buffer.hpp>
#include <clbuf/sharded_halo.hpp>
#include <clbuf/sharded_npy.hpp>
#include <clbuf/telemetry.hpp>
#include <clbuf/tile_plan.hpp>
#include <clbuf/tile_stream.hpp>
#endif

#endif  // CLBUF_CLBUF_HPP
