// SWA bounded replay (ModelOptions::swa_bounded_replay_keep; DeepInfer's "YOCO prefill
// truncation", research note deepinfer-source.md §4, MODEL_SPEC §C.6). Internal to model/.
//
// V4.1 splits into an encoder and a decoder at the first ratio-1 KV source (the "decoder
// boundary", layer 20 in V4.1-Flash): every later layer takes all long-range KV and index keys
// from that source, whose compressor reads the boundary layer's input. In a prefill of a prompt
// of length L (SequenceChunk::prompt_length), the decoder layers compute only the positions
// >= L - KEEP; the source's compressed entries and index keys are still computed from the
// hidden states of every position, so the encoder and all long-range memory are exact. A kept
// query at p sees the window keys in [max(p - W + 1, L - KEEP), p]
// (SequenceState::decoder_window_floor): the skipped positions never write a decoder ring.
// It is an approximation: the last KEEP positions' logits differ from a full prefill's.
//
// Chunked prefill: every chunk of the prompt carries the same prompt_length, so the set of
// computed rows and their visibility do not depend on the chunking (a chunked prefill equals
// the unchunked one in this mode, bitwise under batch_invariant). A chunk whose rows all lie
// before L - KEEP returns a row of NaN logits (it has no final hidden state).
#pragma once

#include <cstdint>
#include <vector>

#include "io/model_config.h"
#include "model/model_batch.h"

namespace deepinfer {

// The decoder boundary: the first layer owning a ratio-1 compressor, or -1 when there is none
// (V4).
int64_t decoder_boundary(const ModelConfig& config);

// Throws when the mode (keep > 0) cannot run on this model: kUnsupported without a ratio-1
// source, when a later layer owns compressed entries or index keys, Engram sits after the
// boundary, or the model carries MTP (whose context would need every position's final
// streams); kInvalidInput when keep < sliding_window + rollback_depth (the decoder rings must
// still hold a full window after the deepest rollback).
void check_swa_bounded_replay(const ModelConfig& config, int64_t keep, int64_t rollback_depth,
                              bool has_mtp);

// Model::Batch::kept_rows and Model::Batch::subset (model_batch.h) are defined in
// swa_replay.cc.

// v [n, width] -> its `rows`, in place.
void gather_rows(std::vector<float>& v, const std::vector<int64_t>& rows, int64_t width);

}  // namespace deepinfer
