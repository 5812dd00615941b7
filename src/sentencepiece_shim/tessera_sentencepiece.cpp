#include "tessera_sentencepiece.h"

#include <sentencepiece_processor.h>

#include <cstring>
#include <string>
#include <vector>

namespace {
void set_error(char* error, size_t capacity, const std::string& message) {
  if (!error || capacity == 0) return;
  const size_t n = std::min(capacity - 1, message.size());
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}
const sentencepiece::SentencePieceProcessor* processor(const void* model) {
  return static_cast<const sentencepiece::SentencePieceProcessor*>(model);
}
}  // namespace

extern "C" {

int tessera_spm_abi(void) { return TESSERA_SPM_ABI; }

void* tessera_spm_load(const char* model_file, char* error, size_t error_capacity) {
  auto* p = new sentencepiece::SentencePieceProcessor();
  const auto status = p->Load(model_file);
  if (!status.ok()) {
    set_error(error, error_capacity, status.ToString());
    delete p;
    return nullptr;
  }
  return p;
}

void tessera_spm_free(void* model) { delete static_cast<sentencepiece::SentencePieceProcessor*>(model); }

int64_t tessera_spm_size(const void* model) { return processor(model)->GetPieceSize(); }

int64_t tessera_spm_encode(const void* model, const char* text, size_t length, int32_t* ids, size_t capacity,
                           char* error, size_t error_capacity) {
  std::vector<int> out;
  const auto status = processor(model)->Encode(std::string_view(text, length), &out);
  if (!status.ok()) {
    set_error(error, error_capacity, status.ToString());
    return -1;
  }
  for (size_t i = 0; i < out.size() && i < capacity; ++i) ids[i] = static_cast<int32_t>(out[i]);
  return static_cast<int64_t>(out.size());
}

int64_t tessera_spm_decode(const void* model, const int32_t* ids, size_t count, char* text, size_t capacity,
                           char* error, size_t error_capacity) {
  std::vector<int> in(ids, ids + count);
  std::string out;
  const auto status = processor(model)->Decode(in, &out);
  if (!status.ok()) {
    set_error(error, error_capacity, status.ToString());
    return -1;
  }
  std::memcpy(text, out.data(), std::min(capacity, out.size()));
  return static_cast<int64_t>(out.size());
}

int64_t tessera_spm_id_to_piece(const void* model, int32_t id, char* piece, size_t capacity) {
  if (id < 0 || id >= processor(model)->GetPieceSize()) return -1;
  const std::string& p = processor(model)->IdToPiece(id);
  std::memcpy(piece, p.data(), std::min(capacity, p.size()));
  return static_cast<int64_t>(p.size());
}

int32_t tessera_spm_piece_to_id(const void* model, const char* piece) {
  const int id = processor(model)->PieceToId(piece);
  if (id == processor(model)->unk_id() && processor(model)->IdToPiece(id) != piece) return -1;
  return id;
}

int tessera_spm_is_special(const void* model, int32_t id) {
  const auto* p = processor(model);
  return p->IsControl(id) || p->IsUnused(id) || p->IsUnknown(id) ? 1 : 0;
}

}  // extern "C"
