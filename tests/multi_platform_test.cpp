// The tests of multi_device_test.cpp with two platforms, PoCL and oclgrind (tests/CMakeLists.txt
// points the ICD loader at both): copies between managers of different platforms.
#define CLBUF_MULTI_SUITE MultiPlatform
#include "multi_device_test.cpp"  // NOLINT(bugprone-suspicious-include)
