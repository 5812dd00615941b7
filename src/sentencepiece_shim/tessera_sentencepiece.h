// libtessera_sentencepiece.so: a C interface over libsentencepiece's SentencePieceProcessor, so
// Tessera can dlopen it with RTLD_LOCAL and keep libsentencepiece's protobuf-lite symbols apart
// from the protobuf that Tessera itself links (tokenizer_sentencepiece.h). Every function returns
// a negative value (or null) on failure and writes a message into `error` when one is given.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TESSERA_SPM_ABI 1
int tessera_spm_abi(void);
void* tessera_spm_load(const char* model_file, char* error, size_t error_capacity);
void tessera_spm_free(void* model);
int64_t tessera_spm_size(const void* model);
// Writes up to `capacity` ids; returns how many the text encodes to (call again if more).
int64_t tessera_spm_encode(const void* model, const char* text, size_t length, int32_t* ids, size_t capacity,
                           char* error, size_t error_capacity);
// Writes up to `capacity` bytes (no terminator); returns the decoded length.
int64_t tessera_spm_decode(const void* model, const int32_t* ids, size_t count, char* text, size_t capacity,
                           char* error, size_t error_capacity);
// The piece of `id` (up to `capacity` bytes); returns its length, -1 for an id out of range.
int64_t tessera_spm_id_to_piece(const void* model, int32_t id, char* piece, size_t capacity);
// The id of `piece`, -1 when the model has no such piece (SentencePiece maps it to <unk>).
int32_t tessera_spm_piece_to_id(const void* model, const char* piece);
// 1 for control / unused / unknown pieces (no text of their own), else 0.
int tessera_spm_is_special(const void* model, int32_t id);

#ifdef __cplusplus
}
#endif
