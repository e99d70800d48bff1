// SPDX-License-Identifier: MIT
// Kept for one release for code that included it directly: staging is internal now
// (detail/staging.hpp).
#ifndef CLBUF_STAGING_HPP
#define CLBUF_STAGING_HPP

#include <clbuf/detail/staging.hpp>

#endif  // CLBUF_STAGING_HPP
