// clbuf: typed, checked, fast transfers between host memory and OpenCL devices.
// One include gives the whole library; the topic headers below hold one concern each.
#ifndef CLBUF_CLBUF_HPP
#define CLBUF_CLBUF_HPP

#define CLBUF_VERSION_MAJOR 0
#define CLBUF_VERSION_MINOR 1
#define CLBUF_VERSION_PATCH 0
#define CLBUF_VERSION \
  (CLBUF_VERSION_MAJOR * 10000 + CLBUF_VERSION_MINOR * 100 + CLBUF_VERSION_PATCH)

#include <clbuf/buffer.hpp>
#include <clbuf/device.hpp>
#include <clbuf/error.hpp>
#include <clbuf/future.hpp>
#include <clbuf/manager.hpp>
#include <clbuf/opencl.hpp>
#include <clbuf/pinned.hpp>
#include <clbuf/pool.hpp>
#include <clbuf/rect.hpp>
#include <clbuf/staging.hpp>
#include <clbuf/telemetry.hpp>
#include <clbuf/view.hpp>

#endif  // CLBUF_CLBUF_HPP
