// SPDX-License-Identifier: MIT
// clbuf's version: the one place it is written. CMake, pkg-config, the Python package and
// the single header read it from here.
#ifndef CLBUF_VERSION_HPP
#define CLBUF_VERSION_HPP

#define CLBUF_VERSION_MAJOR 0
#define CLBUF_VERSION_MINOR 2
#define CLBUF_VERSION_PATCH 0
#define CLBUF_VERSION \
  (CLBUF_VERSION_MAJOR * 10000 + CLBUF_VERSION_MINOR * 100 + CLBUF_VERSION_PATCH)

#endif  // CLBUF_VERSION_HPP
