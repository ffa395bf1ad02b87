// deepinfer._core: thin pybind11 bindings of the offline Engine, its argument and output
// types, the tokenizer and the chat recipe. The Pythonic API (LLM, SamplingParams, ...)
// lives in python/deepinfer/__init__.py. Long calls release the GIL.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "base/error.h"
#include "engine/engine.h"
#include "model/tiny_model.h"
#include "recipe/chat_encoding.h"
#include "recipe/tool_call_constraint.h"
#include "recipe/chat_request.h"
#include "recipe/output_parser.h"
#include "recipe/tokenizer.h"

namespace py = pybind11;
using namespace deepinfer;

namespace {

const recipe::Tokenizer& need_tokenizer(const Engine& e) {
  CHECK(e.tokenizer() != nullptr) << "this model has no tokenizer.json: pass token ids";
  return *e.tokenizer();
}

// `openai`: the server's Chat Completions conversion (recipe/chat_request.h), else the JSON
// taken literally.
recipe::Conversation conversation(const std::string& request_json, const std::string& version = "v4",
                                  bool openai = false) {
  const recipe::ChatRequestOptions options =
      openai ? recipe::chat_completions_request_options(recipe::parse_chat_version(version) ==
                                                        recipe::ChatVersion::kV41)
             : recipe::ChatRequestOptions();
  return recipe::conversation_from_json(recipe::OrderedJson::parse(request_json), options);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "deepinfer C++ core (use the deepinfer package)";
  py::register_exception<Error>(m, "Error", PyExc_ValueError);

  py::class_<SamplingParams>(m, "SamplingParams")
      .def(py::init<>())
      .def_readwrite("temperature", &SamplingParams::temperature)
      .def_readwrite("top_k", &SamplingParams::top_k)
      .def_readwrite("top_p", &SamplingParams::top_p)
      .def_readwrite("min_p", &SamplingParams::min_p)
      .def_readwrite("repetition_penalty", &SamplingParams::repetition_penalty)
      .def_readwrite("presence_penalty", &SamplingParams::presence_penalty)
      .def_readwrite("frequency_penalty", &SamplingParams::frequency_penalty)
      .def_readwrite("seed", &SamplingParams::seed)
      .def_readwrite("max_tokens", &SamplingParams::max_tokens)
      .def_readwrite("min_tokens", &SamplingParams::min_tokens)
      .def_readwrite("ignore_eos", &SamplingParams::ignore_eos)
      .def_readwrite("stop_token_ids", &SamplingParams::stop_token_ids)
      .def_readwrite("logit_bias", &SamplingParams::logit_bias)
      .def_readwrite("closing_bias", &SamplingParams::closing_bias)
      .def("validate", &SamplingParams::validate);

  py::enum_<Numerics>(m, "Numerics")
      .value("official", Numerics::kOfficial)
      .value("reference", Numerics::kReference);

  py::class_<EngineArgs>(m, "EngineArgs")
      .def(py::init<>())
      .def_readwrite("model_dir", &EngineArgs::model_dir)
      .def_property(
          "numerics", [](const EngineArgs& a) { return a.model_options.numerics; },
          [](EngineArgs& a, Numerics n) { a.model_options.numerics = n; })
      .def_property(
          "batch_invariant", [](const EngineArgs& a) { return a.model_options.batch_invariant; },
          [](EngineArgs& a, bool b) { a.model_options.batch_invariant = b; })
      .def_property(  // KEEP (0: off); LLM(swa_bounded_replay=True) gives 140
          "swa_bounded_replay", [](const EngineArgs& a) { return a.model_options.swa_bounded_replay_keep; },
          [](EngineArgs& a, int64_t keep) { a.model_options.swa_bounded_replay_keep = keep; })
      .def_readwrite("dummy_weights", &EngineArgs::dummy_weights)
      .def_readwrite("device", &EngineArgs::device)
      .def_readwrite("gpu_memory_utilization", &EngineArgs::gpu_memory_utilization)
      .def_readwrite("weight_format", &EngineArgs::weight_format)
      .def_readwrite("kv_cache_dtype", &EngineArgs::kv_cache_dtype)
      .def_readwrite("cuda_graphs", &EngineArgs::cuda_graphs)
      .def_readwrite("dummy_seed", &EngineArgs::dummy_seed)
      .def_readwrite("max_num_seqs", &EngineArgs::max_num_seqs)
      .def_readwrite("max_num_batched_tokens", &EngineArgs::max_num_batched_tokens)
      .def_readwrite("max_prefill_tokens_with_decodes", &EngineArgs::max_prefill_tokens_with_decodes)
      .def_readwrite("long_prefill_token_threshold", &EngineArgs::long_prefill_token_threshold)
      .def_readwrite("max_model_len", &EngineArgs::max_model_len)
      .def_readwrite("state_budget_bytes", &EngineArgs::state_budget_bytes)
      .def_readwrite("overlap", &EngineArgs::overlap)
      .def_readwrite("priority", &EngineArgs::priority)
      .def_readwrite("tokenizer_path", &EngineArgs::tokenizer_path)
      .def_property(
          "grammar_max_states", [](const EngineArgs& a) { return a.grammar_limits.max_states; },
          [](EngineArgs& a, int64_t v) { a.grammar_limits.max_states = v; })
      .def_property(
          "grammar_max_memory_mb", [](const EngineArgs& a) { return a.grammar_limits.max_memory_bytes >> 20; },
          [](EngineArgs& a, int64_t v) { a.grammar_limits.max_memory_bytes = v << 20; })
      .def_property(
          "grammar_timeout_ms", [](const EngineArgs& a) { return a.grammar_limits.timeout_ms; },
          [](EngineArgs& a, int64_t v) { a.grammar_limits.timeout_ms = v; })
      .def_readwrite("block_size", &EngineArgs::block_size)
      .def_readwrite("speculative_method", &EngineArgs::speculative_method)
      .def_readwrite("num_speculative_tokens", &EngineArgs::num_speculative_tokens)
      .def_readwrite("spec_scheduling", &EngineArgs::spec_scheduling)
      .def_readwrite("enable_prefix_caching", &EngineArgs::enable_prefix_caching)
      .def_readwrite("prefix_cache_block_tokens", &EngineArgs::prefix_cache_block_tokens)
      .def_readwrite("prefix_cache_bytes", &EngineArgs::prefix_cache_bytes);

  py::class_<EngineStats>(m, "EngineStats")
      .def_readonly("n_steps", &EngineStats::n_steps)
      .def_readonly("n_verifications", &EngineStats::n_verifications)
      .def_readonly("n_drafts_verified", &EngineStats::n_drafts_verified)
      .def_readonly("n_drafts_accepted", &EngineStats::n_drafts_accepted)
      .def_readonly("accepted_at", &EngineStats::accepted_at)
      .def_readonly("verified_at", &EngineStats::verified_at)
      .def_readonly("n_verify_steps", &EngineStats::n_verify_steps)
      .def_readonly("n_verified_tokens", &EngineStats::n_verified_tokens)
      .def_readonly("draft_seconds", &EngineStats::draft_seconds)
      .def_readonly("prefix_cache_queries", &EngineStats::prefix_cache_queries)
      .def_readonly("prefix_cache_hits", &EngineStats::prefix_cache_hits)
      .def_readonly("prefix_cache_lookup_tokens", &EngineStats::prefix_cache_lookup_tokens)
      .def_readonly("prefix_cache_query_tokens", &EngineStats::prefix_cache_query_tokens)
      .def_readonly("prefix_cache_hit_tokens", &EngineStats::prefix_cache_hit_tokens)
      .def_readonly("prefix_cache_block_tokens", &EngineStats::prefix_cache_block_tokens)
      .def("prefix_cache_hit_rate", &EngineStats::prefix_cache_hit_rate)
      .def_property_readonly("num_speculative_tokens",
                             [](const EngineStats& s) { return int64_t(s.accepted_at.size()); })
      .def("mean_acceptance_length", &EngineStats::mean_acceptance_length)
      .def("verified_tokens_per_step", &EngineStats::verified_tokens_per_step)
      .def("draft_time_share", &EngineStats::draft_time_share);

  py::class_<EngineRequest>(m, "EngineRequest")
      .def(py::init<>())
      .def_readwrite("id", &EngineRequest::id)
      .def_readwrite("prompt", &EngineRequest::prompt)
      .def_readwrite("params", &EngineRequest::params)
      .def_readwrite("stop", &EngineRequest::stop)
      .def_readwrite("priority", &EngineRequest::priority)
      .def_readwrite("n_logprobs", &EngineRequest::n_logprobs)
      .def_readwrite("skip_special_tokens", &EngineRequest::skip_special_tokens)
      .def_readwrite("constraint_kind", &EngineRequest::constraint_kind)
      .def_readwrite("constraint", &EngineRequest::constraint);

  py::class_<TokenLogprob>(m, "TokenLogprob")
      .def_readonly("token", &TokenLogprob::token)
      .def_readonly("logprob", &TokenLogprob::logprob)
      .def_readonly("top", &TokenLogprob::top);

  py::class_<RequestOutput>(m, "RequestOutput")
      .def_readonly("id", &RequestOutput::id)
      .def_readonly("new_tokens", &RequestOutput::new_tokens)
      .def_property_readonly("new_text",
                             [](const RequestOutput& o) {
                               return py::str(PyUnicode_DecodeUTF8(o.new_text.data(),
                                                                   py::ssize_t(o.new_text.size()),
                                                                   "replace"));
                             })
      .def_readonly("logprobs", &RequestOutput::logprobs)
      .def_readonly("finished", &RequestOutput::finished)
      .def_readonly("finish_reason", &RequestOutput::finish_reason)
      .def_readonly("stop_reason", &RequestOutput::stop_reason)
      .def_readonly("error", &RequestOutput::error)
      .def_readonly("n_prompt_tokens", &RequestOutput::n_prompt_tokens)
      .def_readonly("n_output_tokens", &RequestOutput::n_output_tokens)
      .def_readonly("n_preemptions", &RequestOutput::n_preemptions)
      .def_readonly("n_cached_tokens", &RequestOutput::n_cached_tokens);

  py::class_<Engine>(m, "Engine")
      .def(py::init<const EngineArgs&>(), py::call_guard<py::gil_scoped_release>())
      .def("add_request", &Engine::add_request)
      .def("abort", &Engine::abort)
      .def("step", &Engine::step, py::call_guard<py::gil_scoped_release>())
      .def("has_unfinished", &Engine::has_unfinished)
      .def("stats", [](const Engine& e) { return e.stats(); })
      .def("generate", &Engine::generate, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("vocab_size", [](const Engine& e) { return e.model_config().vocab_size; })
      .def_property_readonly("model_type", [](const Engine& e) { return e.model_config().model_type; })
      .def_property_readonly("max_position_embeddings",
                             [](const Engine& e) { return e.model_config().max_position_embeddings; })
      .def_property_readonly("eos_token_ids",
                             [](const Engine& e) { return e.model_config().eos_token_ids; })
      .def_property_readonly("has_tokenizer", [](const Engine& e) { return e.tokenizer() != nullptr; })
      .def_property_readonly("device", [](const Engine& e) { return e.runner().name(); })
      .def_property_readonly("drafter", [](const Engine& e) { return e.runner().drafter(); })
      .def_property_readonly("max_model_len", &Engine::max_model_len)
      .def("encode",
           [](const Engine& e, const std::string& text, bool add_special_tokens) {
             return need_tokenizer(e).encode(text, add_special_tokens);
           },
           py::arg("text"), py::arg("add_special_tokens") = true)
      .def("decode",
           [](const Engine& e, const std::vector<int32_t>& ids, bool skip_special_tokens) {
             const std::string s = need_tokenizer(e).decode(ids, skip_special_tokens);
             return py::str(PyUnicode_DecodeUTF8(s.data(), py::ssize_t(s.size()), "replace"));
           },
           py::arg("ids"), py::arg("skip_special_tokens") = true)
      // Chat: `request_json` is a chat request (recipe/chat_request.h: messages, thinking_mode,
      // tools, ...); returns the prompt's token ids. openai: the Chat Completions conversion.
      .def("encode_chat",
           [](const Engine& e, const std::string& request_json, const std::string& version, bool openai) {
             return recipe::encode_conversation(conversation(request_json, version, openai),
                                                recipe::parse_chat_version(version),
                                                need_tokenizer(e));
           },
           py::arg("request_json"), py::arg("version") = "v4", py::arg("openai") = false);

  // The structured-output constraint that enforces a chat request's tool_choice "required"
  // (recipe/tool_call_constraint.h; parallel_tool_calls false: exactly one call), or None.
  m.def("default_model", &default_model,
        "The model LLM() runs when none is named: $DEEPINFER_DEFAULT_MODEL, else the trained tiny "
        "V4.1 model of the source tree, else '' (the built-in random tiny model).");
  m.def("tool_call_constraint", [](const std::string& request_json, const std::string& version,
                                   bool openai) -> py::object {
    const recipe::Conversation conv = conversation(request_json, version, openai);
    if (conv.tool_choice != recipe::ToolChoice::kRequired || conv.tools.empty()) return py::none();
    const recipe::OrderedJson body = recipe::OrderedJson::parse(request_json);
    bool parallel = true;
    if (body.contains("parallel_tool_calls")) {
      CHECK(body["parallel_tool_calls"].is_boolean()) << "parallel_tool_calls must be true or false";
      parallel = body["parallel_tool_calls"].get<bool>();
    }
    const recipe::DsmlDialect dialect = recipe::parse_chat_version(version) == recipe::ChatVersion::kV41
                                            ? recipe::DsmlDialect::kV41
                                            : recipe::DsmlDialect::kV4;
    return py::str(recipe::dsml_tool_call_constraint(conv.tools, dialect, parallel));
  }, py::arg("request_json"), py::arg("version") = "v4", py::arg("openai") = false);

  // Parses a completion of the chat request: (reasoning_content, content, [(name, arguments)]).
  m.def("parse_chat_output", [](const std::string& request_json, const std::string& text) {
    const recipe::ParsedOutput out =
        recipe::parse_output(text, recipe::parser_options_for(conversation(request_json)));
    std::vector<std::pair<std::string, std::string>> calls;
    for (const auto& c : out.tool_calls) calls.emplace_back(c.name, c.arguments);
    return py::make_tuple(out.reasoning_content, out.content, calls);
  });
}
