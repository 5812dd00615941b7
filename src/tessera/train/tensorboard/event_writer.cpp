#include "tessera/train/tensorboard/event_writer.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "tessera/core/error.h"
#include "tessera/train/tensorboard/event.pb.h"
#include "tessera/train/tensorboard/tfrecord.h"

namespace tessera::train::tensorboard {

namespace fs = std::filesystem;

namespace {
double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string serialized(const ::tensorboard::Event& event) {
  std::string bytes;
  if (!event.SerializeToString(&bytes)) TESSERA_FAIL("TensorBoard: serialising an Event failed");
  return bytes;
}
}  // namespace

EventWriter::EventWriter(const std::string& folder) {
  std::error_code error;
  fs::create_directories(folder, error);
  if (error || !fs::is_directory(folder))
    TESSERA_CONFIG_FAIL("logging.tensorboard_dir: cannot create folder '", folder, "' (", error.message(), ")");
  char host[256] = "localhost";
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  double now = wall_time();
  path_ = (fs::path(folder) / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host + "." +
                               std::to_string(getpid())))
              .string();
  out_.open(path_, std::ios::out | std::ios::binary | std::ios::app);
  if (!out_) TESSERA_CONFIG_FAIL("logging.tensorboard_dir: cannot open '", path_, "' for writing");
  ::tensorboard::Event first;
  first.set_wall_time(now);
  first.set_file_version("brain.Event:2");
  write(serialized(first));
}

void EventWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  ::tensorboard::Event event;
  event.set_wall_time(wall_time());
  event.set_step(step);
  for (const auto& [tag, value] : values) {
    auto* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  write(serialized(event));
}

void EventWriter::write(const std::string& serialized_event) {
  out_ << tfrecord(serialized_event);
  out_.flush();
  if (!out_) TESSERA_FAIL("writing the TensorBoard event file '", path_, "' failed (disk full?)");
}

}  // namespace tessera::train::tensorboard
