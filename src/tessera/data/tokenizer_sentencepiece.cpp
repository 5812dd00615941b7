#include "tessera/data/tokenizer_sentencepiece.h"

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>
#include <mutex>

#include "tessera/core/error.h"

#ifndef TESSERA_SPM_BUILD_LIBDIR
#define TESSERA_SPM_BUILD_LIBDIR ""
#endif
#ifndef TESSERA_SPM_INSTALL_LIBDIR
#define TESSERA_SPM_INSTALL_LIBDIR ""
#endif

#if defined(__SANITIZE_ADDRESS__)
#define TESSERA_SPM_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESSERA_SPM_UNDER_ASAN 1
#endif
#endif

namespace tessera::data {

bool SentencePieceTokenizer::available_in_this_build() {
#ifdef TESSERA_SPM_UNDER_ASAN
  return false;
#else
  return true;
#endif
}

namespace {
constexpr const char* kShimName = "libtessera_sentencepiece.so";
constexpr int kAbi = 1;  // TESSERA_SPM_ABI of src/sentencepiece_shim/tessera_sentencepiece.h
}  // namespace

// The shim's entry points (src/sentencepiece_shim/tessera_sentencepiece.h).
struct SentencePieceTokenizer::Shim {
  void* handle = nullptr;
  std::string path;
  int (*abi)() = nullptr;
  void* (*load)(const char*, char*, size_t) = nullptr;
  void (*free)(void*) = nullptr;
  int64_t (*size)(const void*) = nullptr;
  int64_t (*encode)(const void*, const char*, size_t, int32_t*, size_t, char*, size_t) = nullptr;
  int64_t (*decode)(const void*, const int32_t*, size_t, char*, size_t, char*, size_t) = nullptr;
  int64_t (*id_to_piece)(const void*, int32_t, char*, size_t) = nullptr;
  int32_t (*piece_to_id)(const void*, const char*) = nullptr;
  int (*is_special)(const void*, int32_t) = nullptr;

  static std::shared_ptr<const Shim> open() {
    static std::mutex mutex;
    static std::weak_ptr<const Shim> cached;
    std::lock_guard<std::mutex> lock(mutex);
    if (auto shim = cached.lock()) return shim;
    if (!available_in_this_build())
      TESSERA_CONFIG_FAIL("SentencePieceTokenizer is not available in an AddressSanitizer build: its shim needs ",
                          "dlopen(RTLD_DEEPBIND), which the sanitizer runtime refuses");
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("TESSERA_SENTENCEPIECE_LIB"); env && *env) candidates.emplace_back(env);
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      candidates.push_back((exe.parent_path().parent_path() / "lib" / kShimName).string());
      candidates.push_back((exe.parent_path() / kShimName).string());
    }
    if (*TESSERA_SPM_BUILD_LIBDIR) candidates.push_back(std::string(TESSERA_SPM_BUILD_LIBDIR) + "/" + kShimName);
    if (*TESSERA_SPM_INSTALL_LIBDIR) candidates.push_back(std::string(TESSERA_SPM_INSTALL_LIBDIR) + "/" + kShimName);
    candidates.emplace_back(kShimName);  // the loader's path
    auto shim = std::make_shared<Shim>();
    std::string errors;
    for (const auto& path : candidates) {
      const bool bare = path.find('/') == std::string::npos;
      if (!bare && !std::filesystem::exists(path, ec)) continue;
      // RTLD_LOCAL keeps the shim's symbols out of the process; RTLD_DEEPBIND makes libsentencepiece
      // bind its bundled protobuf-lite before the process's libprotobuf (same names, other version).
      shim->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (shim->handle) {
        shim->path = path;
        break;
      }
      const char* why = dlerror();
      errors += "; " + path + ": " + (why ? why : "dlopen failed");
    }
    if (!shim->handle)
      TESSERA_CONFIG_FAIL("SentencePieceTokenizer needs ", kShimName, " (built from src/sentencepiece_shim when ",
                          "libsentencepiece-dev is installed: scripts/install-deps.sh); not found next to the ",
                          "executable (../lib), on the loader's path or at $TESSERA_SENTENCEPIECE_LIB", errors);
    auto bind = [&](auto& fn, const char* name) {
      void* symbol = dlsym(shim->handle, name);
      if (!symbol) TESSERA_CONFIG_FAIL(shim->path, " lacks ", name, " (a shim from another Tessera version?)");
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(symbol);
    };
    bind(shim->abi, "tessera_spm_abi");
    if (shim->abi() != kAbi)
      TESSERA_CONFIG_FAIL(shim->path, " has interface version ", shim->abi(), ", this Tessera needs ", kAbi);
    bind(shim->load, "tessera_spm_load");
    bind(shim->free, "tessera_spm_free");
    bind(shim->size, "tessera_spm_size");
    bind(shim->encode, "tessera_spm_encode");
    bind(shim->decode, "tessera_spm_decode");
    bind(shim->id_to_piece, "tessera_spm_id_to_piece");
    bind(shim->piece_to_id, "tessera_spm_piece_to_id");
    bind(shim->is_special, "tessera_spm_is_special");
    cached = shim;
    return shim;  // the handle stays open for the process (libsentencepiece has static state)
  }
};

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_file, int64_t vocab_extra_ids) {
  std::error_code ec;
  if (model_file.empty())
    TESSERA_CONFIG_FAIL("tokenizer type SentencePieceTokenizer needs a model: set --tokenizer-model / data.tokenizer_model");
  if (!std::filesystem::is_regular_file(model_file, ec))
    TESSERA_CONFIG_FAIL("the SentencePiece model '", model_file, "' does not exist or is not a file (data.tokenizer_model)");
  if (vocab_extra_ids < 0) TESSERA_CONFIG_FAIL("data.vocab_extra_ids = ", vocab_extra_ids, " must be >= 0");
  shim_ = Shim::open();
  char error[512] = {0};
  model_ = shim_->load(model_file.c_str(), error, sizeof(error));
  if (!model_) TESSERA_CONFIG_FAIL("cannot load the SentencePiece model '", model_file, "': ", error);
  model_size_ = shim_->size(model_);
  pad_ = token_to_id("<pad>");
  eos_ = token_to_id("</s>");
  unk_ = token_to_id("<unk>");
  bos_ = token_to_id("<s>");
  if (pad_ < 0 || eos_ < 0)
    TESSERA_CONFIG_FAIL("the SentencePiece model '", model_file, "' has no <pad> or </s> piece (T5 needs both: ",
                        "train it with --pad_id and --eos_id)");
  // HF T5: <extra_id_k> = model size + extra - 1 - k (those the model already holds keep their id).
  std::vector<std::string> missing;
  for (int64_t k = vocab_extra_ids - 1; k >= 0; --k) {
    const std::string piece = "<extra_id_" + std::to_string(k) + ">";
    if (shim_->piece_to_id(model_, piece.c_str()) < 0) added_.push_back(piece);
  }
  extra_ids_.resize(static_cast<size_t>(vocab_extra_ids));
  for (int64_t k = 0; k < vocab_extra_ids; ++k)
    extra_ids_[static_cast<size_t>(k)] = token_to_id("<extra_id_" + std::to_string(k) + ">");
}

SentencePieceTokenizer::~SentencePieceTokenizer() {
  if (model_) shim_->free(model_);
}

int32_t SentencePieceTokenizer::token_to_id(const std::string& piece) const {
  const int32_t id = shim_->piece_to_id(model_, piece.c_str());
  if (id >= 0) return id;
  for (size_t k = 0; k < added_.size(); ++k)
    if (added_[k] == piece) return static_cast<int32_t>(model_size_ + static_cast<int64_t>(k));
  return -1;
}

std::string SentencePieceTokenizer::id_to_token(int32_t id) const {
  if (id >= 0 && id < model_size_) {
    std::string piece(256, '\0');
    int64_t n = shim_->id_to_piece(model_, id, piece.data(), piece.size());
    if (n > static_cast<int64_t>(piece.size())) {
      piece.resize(static_cast<size_t>(n));
      n = shim_->id_to_piece(model_, id, piece.data(), piece.size());
    }
    piece.resize(static_cast<size_t>(n));
    return piece;
  }
  if (id >= model_size_ && id < vocab_size()) return added_[static_cast<size_t>(id - model_size_)];
  TESSERA_FAIL("SentencePiece id ", id, " is outside the vocabulary of ", vocab_size());
}

bool SentencePieceTokenizer::continues_word(int32_t id) const {
  if (id < 0 || id >= model_size_ || shim_->is_special(model_, id)) return false;
  return !id_to_token(id).starts_with("\xE2\x96\x81");  // U+2581, SentencePiece's word-boundary mark
}

std::vector<int32_t> SentencePieceTokenizer::tokenize(std::string_view text) const {
  // A sentinel written in the text ("<extra_id_3>") is its id, the text around it encoded apart (as
  // HF's T5Tokenizer and Megatron's SentencePieceTokenizer split on their special tokens).
  std::vector<int32_t> out;
  size_t start = 0;
  for (size_t at = text.find("<extra_id_"); at != std::string_view::npos; at = text.find("<extra_id_", at + 1)) {
    const size_t close = text.find('>', at);
    if (close == std::string_view::npos) break;
    const int32_t id = extra_ids_.empty() ? -1 : token_to_id(std::string(text.substr(at, close + 1 - at)));
    if (id < 0 || std::find(extra_ids_.begin(), extra_ids_.end(), id) == extra_ids_.end()) continue;
    const auto before = encode(text.substr(start, at - start));
    out.insert(out.end(), before.begin(), before.end());
    out.push_back(id);
    start = close + 1;
  }
  const auto rest = encode(text.substr(start));
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size() + 16);
  char error[512] = {0};
  int64_t n = shim_->encode(model_, text.data(), text.size(), ids.data(), ids.size(), error, sizeof(error));
  if (n > static_cast<int64_t>(ids.size())) {
    ids.resize(static_cast<size_t>(n));
    n = shim_->encode(model_, text.data(), text.size(), ids.data(), ids.size(), error, sizeof(error));
  }
  if (n < 0) TESSERA_FAIL("SentencePiece cannot encode the text: ", error);
  ids.resize(static_cast<size_t>(n));
  return ids;
}

std::string SentencePieceTokenizer::detokenize(std::span<const int32_t> ids) const {
  std::string out;
  std::vector<int32_t> run;  // model ids, decoded together
  char error[512] = {0};
  auto flush = [&] {
    if (run.empty()) return;
    std::string text(run.size() * 16 + 16, '\0');
    int64_t n = shim_->decode(model_, run.data(), run.size(), text.data(), text.size(), error, sizeof(error));
    if (n > static_cast<int64_t>(text.size())) {
      text.resize(static_cast<size_t>(n));
      n = shim_->decode(model_, run.data(), run.size(), text.data(), text.size(), error, sizeof(error));
    }
    if (n < 0) TESSERA_FAIL("SentencePiece cannot decode: ", error);
    text.resize(static_cast<size_t>(n));
    out += text;
    run.clear();
  };
  for (int32_t id : ids) {
    if (id >= 0 && id < model_size_) {
      run.push_back(id);
      continue;
    }
    flush();
    out += id_to_token(id);  // throws for an unknown id
  }
  flush();
  return out;
}

}  // namespace tessera::data
