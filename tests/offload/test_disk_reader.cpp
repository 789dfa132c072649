// DiskReader: bytes equal the file's for random ranges at odd offsets (O_DIRECT and buffered),
// ring wrap-around, back-pressure, release from another thread, one-line errors on truncated or
// missing files, fallback where O_DIRECT is refused, and shutdown with work pending.
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <random>
#include <thread>

#include "offload_test_util.h"

using namespace endor;
using offloadtest::TempDir;

namespace {

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> b(n);
  for (uint8_t& x : b) x = uint8_t(rng());
  return b;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

bool one_line(const std::string& s) { return !s.empty() && s.find('\n') == std::string::npos; }

// Random ranges with odd offsets and lengths, up to n_buffers in flight, each checked then released.
void check_random_ranges(const std::string& path, const std::vector<uint8_t>& file, bool direct, uint32_t n_buffers,
                         uint64_t seed) {
  DiskReaderOptions o;
  o.n_buffers = n_buffers;
  o.max_request = 70000;
  o.direct = direct;
  DiskReader reader(path, o);
  std::mt19937_64 rng(seed);
  struct Want {
    uint64_t offset, length;
  };
  std::vector<Want> wants;
  for (int i = 0; i < 200; ++i) {
    const uint64_t length = 1 + rng() % o.max_request;
    const uint64_t offset = rng() % (file.size() - length + 1);
    wants.push_back({offset, length});
  }
  wants.push_back({0, 1});
  wants.push_back({file.size() - 1, 1});                  // the very last byte
  wants.push_back({file.size() - 4096, 4096});            // an aligned tail
  size_t submitted = 0, mismatches = 0;
  for (size_t i = 0; i < wants.size(); ++i) {
    while (submitted < wants.size() && submitted < i + n_buffers) {
      CHECK(reader.submit(wants[submitted].offset, wants[submitted].length) == submitted);
      ++submitted;
    }
    const DiskReader::Chunk c = reader.wait(i);
    REQUIRE(c.length == wants[i].length);
    if (std::memcmp(c.data, file.data() + wants[i].offset, c.length) != 0) ++mismatches;
    reader.release(i);
  }
  CHECK(mismatches == 0);
  const DiskReaderStats s = reader.stats();
  CHECK(s.reads == wants.size());
  uint64_t total = 0;
  for (const Want& w : wants) total += w.length;
  CHECK(s.bytes == total);
  CHECK(s.device_bytes >= total);
  if (!direct) CHECK(reader.mode() == "buffered pread (asked)");
}

}  // namespace

TEST_CASE("disk reader: random ranges at odd offsets equal the file's bytes, O_DIRECT and buffered") {
  TempDir dir;
  const std::vector<uint8_t> file = random_bytes((1 << 20) + 12345, 5);
  const std::string path = dir.file("data.bin");
  write_file(path, file);
  for (uint32_t n : {1u, 2u, 3u}) {
    check_random_ranges(path, file, true, n, 100 + n);
    check_random_ranges(path, file, false, n, 200 + n);
  }
  DiskReaderOptions o;
  o.max_request = 4096;
  DiskReader reader(path, o);
  const std::string mode = reader.mode();
  INFO("mode: ", mode);
  CHECK((mode == "O_DIRECT" || mode.rfind("buffered pread (O_DIRECT", 0) == 0));
  CHECK(reader.direct() == (mode == "O_DIRECT"));

  // tmpfs too (where O_DIRECT is refused on older kernels; newer ones accept it).
  if (access("/dev/shm", W_OK) == 0) {
    const std::string shm = "/dev/shm/endor-offload-test-" + std::to_string(::getpid());
    write_file(shm, file);
    check_random_ranges(shm, file, true, 2, 300);
    ::unlink(shm.c_str());
  }
}

TEST_CASE("disk reader: where O_DIRECT is refused it reads buffered and says so") {
  // procfs refuses O_DIRECT (EINVAL at open, or at the first read).
  std::ifstream in("/proc/version", std::ios::binary);
  const std::string want((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(!want.empty());
  DiskReaderOptions o;
  o.max_request = 4096;
  DiskReader reader("/proc/version", o);
  const DiskReader::Ticket t = reader.submit(0, want.size());
  const DiskReader::Chunk c = reader.wait(t);
  CHECK(std::string(reinterpret_cast<const char*>(c.data), c.length) == want);
  INFO("mode: ", reader.mode());
  CHECK(reader.mode().rfind("buffered pread (O_DIRECT", 0) == 0);
  CHECK_FALSE(reader.direct());
  reader.release(t);
}

TEST_CASE("disk reader: ring wrap-around and back-pressure") {
  TempDir dir;
  const std::vector<uint8_t> file = random_bytes(200000, 9);
  const std::string path = dir.file("data.bin");
  write_file(path, file);
  DiskReaderOptions o;
  o.n_buffers = 2;
  o.max_request = 10000;
  DiskReader reader(path, o);

  // Ticket t uses buffer t mod 2: same offsets land at the same addresses two tickets apart.
  std::vector<const uint8_t*> at;
  for (uint64_t t = 0; t < 8; ++t) {
    CHECK(reader.submit(4096 * (t % 2) + 100, 5000) == t);
    const DiskReader::Chunk c = reader.wait(t);
    CHECK(std::memcmp(c.data, file.data() + 4096 * (t % 2) + 100, 5000) == 0);
    at.push_back(c.data);
    reader.release(t);
  }
  CHECK(at[0] != at[1]);
  for (size_t t = 2; t < at.size(); ++t) CHECK(at[t] == at[t - 2]);

  // Four requests on two buffers: the third waits until the first is released.
  for (uint64_t i = 0; i < 4; ++i) reader.submit(i * 20000 + 7, 9000);
  reader.wait(8);
  reader.wait(9);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(reader.ready(10));
  reader.release(8);
  const DiskReader::Chunk c10 = reader.wait(10);
  CHECK(std::memcmp(c10.data, file.data() + 2 * 20000 + 7, 9000) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_FALSE(reader.ready(11));
  // A release from another thread (as a CUDA host callback does) unblocks a waiting consumer.
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    reader.release(9);
  });
  const DiskReader::Chunk c11 = reader.wait(11);
  releaser.join();
  CHECK(std::memcmp(c11.data, file.data() + 3 * 20000 + 7, 9000) == 0);
  reader.release(10);
  reader.release(11);
  CHECK(reader.stats().backpressure_s > 0);

  // Releasing a queued ticket drops it; waiting on it then is an error, not a hang.
  reader.submit(0, 100);  // 12
  reader.submit(0, 100);  // 13
  reader.release(12);
  reader.release(13);
  CHECK_THROWS_AS(reader.wait(13), Error);
  const DiskReader::Ticket t14 = reader.submit(50, 100);
  CHECK(std::memcmp(reader.wait(t14).data, file.data() + 50, 100) == 0);
  reader.release(t14);
}

TEST_CASE("disk reader: truncated files and bad requests are one-line errors, and the reader goes on") {
  TempDir dir;
  const std::vector<uint8_t> file = random_bytes(10000, 3);
  const std::string path = dir.file("short.bin");
  write_file(path, file);
  DiskReaderOptions o;
  o.n_buffers = 2;
  o.max_request = 8192;
  DiskReader reader(path, o);

  DiskReader::Ticket t = reader.submit(8000, 4000);  // past the end
  std::string e;
  try {
    reader.wait(t);
  } catch (const Error& err) {
    e = err.what();
  }
  CHECK(one_line(e));
  CHECK(e.find(path) != std::string::npos);
  CHECK(e.find("truncated") != std::string::npos);
  CHECK(e.find("ends at 10000") != std::string::npos);
  reader.release(t);

  t = reader.submit(0, 100);
  CHECK(std::memcmp(reader.wait(t).data, file.data(), 100) == 0);
  reader.release(t);

  // The file shrinks under the reader.
  REQUIRE(::truncate(path.c_str(), 5000) == 0);
  t = reader.submit(4096, 3000);
  CHECK_THROWS_WITH_AS(reader.wait(t), doctest::Contains("truncated"), Error);
  reader.release(t);

  CHECK_THROWS_AS(reader.submit(0, 0), Error);
  CHECK_THROWS_AS(reader.submit(0, 8193), Error);
  CHECK_THROWS_AS(reader.submit(UINT64_MAX - 10, 100), Error);
  CHECK_THROWS_AS(reader.wait(1000), Error);  // never submitted
  t = reader.submit(0, 10);
  reader.wait(t);
  reader.release(t);
  reader.release(t);  // twice: no effect
  CHECK_THROWS_AS(reader.wait(t), Error);

  e.clear();
  try {
    DiskReader missing(dir.file("absent.bin"), o);
  } catch (const Error& err) {
    e = err.what();
  }
  CHECK(one_line(e));
  CHECK(e.find("absent.bin") != std::string::npos);
  DiskReaderOptions bad = o;
  bad.max_request = 0;
  CHECK_THROWS_AS(DiskReader(path, bad), Error);
  bad = o;
  bad.n_buffers = 0;
  CHECK_THROWS_AS(DiskReader(path, bad), Error);
}

TEST_CASE("disk reader: shutdown with queued requests, held buffers and a blocked thread") {
  TempDir dir;
  const std::vector<uint8_t> file = random_bytes(1 << 20, 4);
  const std::string path = dir.file("data.bin");
  write_file(path, file);
  DiskReaderOptions o;
  o.n_buffers = 2;
  o.max_request = 65536;
  std::atomic<int> freed{0};
  o.allocate = [](size_t n) { return std::malloc(n); };
  o.deallocate = [&](void* p) {
    ++freed;
    std::free(p);
  };
  const auto t0 = std::chrono::steady_clock::now();
  {
    DiskReader reader(path, o);
    for (int i = 0; i < 10; ++i) reader.submit(uint64_t(i) * 65536, 65536);
    reader.wait(0);
    reader.wait(1);  // both buffers held: the thread blocks on ticket 2
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  { DiskReader idle(path, o); }
  CHECK(freed == 4);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
}

TEST_CASE("disk reader: submit_into reads straight into given memory, mixed with staged reads; bad targets throw") {
  TempDir dir;
  const std::vector<uint8_t> file = random_bytes(3 * 4096 * 5 + 777, 9);
  const std::string path = dir.file("data.bin");
  write_file(path, file);
  for (bool direct : {true, false}) {
    CAPTURE(direct);
    DiskReaderOptions o;
    o.max_request = 3 * 4096;
    o.direct = direct;
    DiskReader reader(path, o);
    void* raw = nullptr;
    REQUIRE(::posix_memalign(&raw, 4096, 4 * 4096) == 0);
    uint8_t* dst = static_cast<uint8_t*>(raw);
    // Aligned offset, a length that ends mid-page (O_DIRECT reads the whole page), then the file's tail.
    const DiskReader::Ticket a = reader.submit_into(4096, 2 * 4096 + 100, dst, 4 * 4096);
    const DiskReader::Ticket b = reader.submit(5, 4096);  // a staged read in between
    const DiskReader::Chunk ca = reader.wait(a);
    CHECK(ca.data == dst);
    CHECK(ca.length == 2 * 4096 + 100);
    CHECK(std::equal(dst, dst + ca.length, file.begin() + 4096));
    reader.release(a);
    const DiskReader::Chunk cb = reader.wait(b);
    CHECK(std::equal(cb.data, cb.data + cb.length, file.begin() + 5));
    reader.release(b);
    const uint64_t tail_at = file.size() / 4096 * 4096;
    const DiskReader::Ticket c = reader.submit_into(tail_at, file.size() - tail_at, dst, 4096);
    const DiskReader::Chunk cc = reader.wait(c);
    CHECK(std::equal(cc.data, cc.data + cc.length, file.begin() + int64_t(tail_at)));
    reader.release(c);
    // Past the end of the file: a one-line error from wait().
    const DiskReader::Ticket d = reader.submit_into(tail_at, 4096, dst, 4096);
    CHECK_THROWS_AS(reader.wait(d), Error);
    reader.release(d);
    CHECK_THROWS_AS(reader.submit_into(100, 4096, dst, 4 * 4096), Error);        // offset not aligned
    CHECK_THROWS_AS(reader.submit_into(4096, 4096, dst + 8, 3 * 4096), Error);   // address not aligned
    CHECK_THROWS_AS(reader.submit_into(4096, 4097, dst, 4096), Error);           // does not fit
    CHECK_THROWS_AS(reader.submit_into(4096, 0, dst, 4096), Error);
    std::free(raw);
  }
}
