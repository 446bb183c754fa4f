// Linked into the test binaries of untrusted-input readers (formats, images): under ASan, an
// allocation over 512 MB is reported as an error instead of being attempted, so a reader that
// allocates what a file declares before checking it against the file fails its test (a
// 30000 x 30000 RGB image would take 2.7 GB).
extern "C" __attribute__((used)) const char* __asan_default_options() {
  return "max_allocation_size_mb=512:allocator_may_return_null=0";
}
