// A TensorBoard event file of scalar curves: events.out.tfevents.<seconds>.<host>.<pid> in a
// folder, TFRecord-framed Event messages (event.proto), the first one file_version "brain.Event:2",
// then one Event per step with a Summary of tagged simple_value scalars (float32, as TensorBoard
// stores them). Flushed after every event so a killed job keeps its curves.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace tessera::train::tensorboard {

class EventWriter {
 public:
  explicit EventWriter(const std::string& folder);  // creates the folder; throws ConfigError naming it
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  const std::string& path() const { return path_; }

 private:
  void write(const std::string& serialized_event);
  std::string path_;
  std::ofstream out_;
};

}  // namespace tessera::train::tensorboard
