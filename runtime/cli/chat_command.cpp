// endor-infer --chat: template rendering, prompt-prefix reuse in the KV cache, streamed answers.
#include "chat_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace endor::cli {
namespace {

void emit(const std::string& text) {
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

void add_id(std::vector<int32_t>& ids, int32_t id) {
  if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
}

}  // namespace

ChatSetup load_chat_setup(const ContainerReader& container, const Tokenizer& tokenizer) {
  const std::optional<ChatTemplateSource> source = find_chat_template(
      container.file("tokenizer_config.json"), container.file("chat_template.jinja"), container.path() + ":");
  if (!source)
    throw FileError(container.path(),
                    "the container holds no chat template (neither chat_template.jinja nor a \"chat_template\" in "
                    "tokenizer_config.json)",
                    ", so --chat cannot format a conversation; use -p for plain text continuation");
  ChatSetup setup{ChatTemplate::parse(source->text, source->source_name), source->bos_token, source->eos_token, {}};
  const ModelConfig config = parse_model_config(container.manifest().config, container.path());
  for (int32_t id : config.eos_token_ids) add_id(setup.stop_ids, id);
  const nlohmann::json& gen = container.manifest().generation_config;
  if (gen.is_object() && gen.contains("eos_token_id")) {
    const nlohmann::json& e = gen["eos_token_id"];
    if (e.is_number_integer()) add_id(setup.stop_ids, e.get<int32_t>());
    if (e.is_array())
      for (const auto& x : e)
        if (x.is_number_integer()) add_id(setup.stop_ids, x.get<int32_t>());
  }
  if (!setup.eos_token.empty())
    if (const std::optional<int32_t> id = tokenizer.token_id(setup.eos_token)) add_id(setup.stop_ids, *id);
  for (const char* name : {"<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "</s>"})
    if (const std::optional<int32_t> id = tokenizer.token_id(name))
      if (tokenizer.is_special(*id)) add_id(setup.stop_ids, *id);
  return setup;
}

void run_chat(Model& model, const Tokenizer& tokenizer, const ChatSetup& setup, Sampler& sampler,
              const GenerationOptions& gen_options, const ChatOptions& options) {
  const bool interactive = !options.prompt && ::isatty(STDIN_FILENO) != 0;
  std::unique_ptr<KvCache> cache = model.make_cache(options.context);
  const size_t room = cache->capacity();
  std::vector<int32_t> cached;  // the ids whose keys/values the cache holds, in order
  std::vector<ChatMessage> history;
  GenerationOptions gen = gen_options;
  gen.stop_ids = setup.stop_ids;
  const auto is_stop = [&](int32_t id) {
    return std::find(gen.stop_ids.begin(), gen.stop_ids.end(), id) != gen.stop_ids.end() ||
           std::find(model.config().eos_token_ids.begin(), model.config().eos_token_ids.end(), id) !=
               model.config().eos_token_ids.end();
  };

  size_t turn = 0;
  for (;;) {
    std::string line;
    if (options.prompt) {
      if (turn > 0) break;
      line = *options.prompt;
    } else {
      if (interactive) emit("> ");
      if (!std::getline(std::cin, line)) {
        if (interactive) emit("\n");
        break;
      }
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    }
    ++turn;
    history.push_back({"user", line});
    try {
      const std::string text = setup.chat_template.render_chat(history, true, setup.bos_token, setup.eos_token);
      const std::vector<int32_t> ids = tokenizer.encode(text, /*add_special_tokens=*/false);
      if (ids.empty()) throw Error(setup.chat_template.source_name() + ": the template rendered an empty prompt");
      if (ids.size() + 1 > room)
        throw Error("the conversation is " + std::to_string(ids.size()) + " tokens, and the context holds " +
                    std::to_string(room) + " (with one to answer); start a new chat" +
                    (options.context < model.config().max_positions ? " or give a larger --ctx" : ""));
      // Reuse the cached prefix; at least one token is prefilled, for the next token's logits.
      size_t common = 0;
      while (common < cached.size() && common < ids.size() && cached[common] == ids[common]) ++common;
      common = std::min(common, ids.size() - 1);
      cache->truncate(common);
      cached.resize(common);
      const std::vector<int32_t> fresh(ids.begin() + std::ptrdiff_t(common), ids.end());
      if (options.dump_prompt) {
        std::fprintf(stderr, "chat prompt (%zu tokens, %zu reused from the cache):\n%s\n", ids.size(), common,
                     text.c_str());
        std::fprintf(stderr, "chat prompt ids: %s\n", format_ids(ids).c_str());
      }
      // Text streams out as its UTF-8 completes; the decoder first sees the prompt for context.
      StreamingDecoder decoder(tokenizer, /*skip_special_tokens=*/true);
      decoder.follow(ids);
      std::vector<int32_t> answer;
      GenerationStats st;
      const std::vector<int32_t> out = generate_in_cache(
          model, *cache, fresh, sampler, gen,
          [&](int32_t id) {
            if (gen.stop_at_eos && is_stop(id)) return;
            answer.push_back(id);
            emit(decoder.push(id));
          },
          &st);
      emit(decoder.flush());
      emit("\n");
      cached = ids;
      cached.insert(cached.end(), out.begin(), out.end() - (out.empty() ? 0 : 1));  // the last was never fed
      history.push_back({"assistant", tokenizer.decode(answer, /*skip_special_tokens=*/true)});
      if (st.stop == StopReason::Context)
        std::fprintf(stderr, "note: the answer stopped at the end of the context (%zu tokens)\n", room);
      if (options.stats)
        std::fprintf(stderr, "chat turn %zu: prompt %zu tokens (%zu prefilled, %zu reused), %zu generated, "
                     "prefill %.2f ms, decode %.2f tokens/s\n", turn, ids.size(), fresh.size(), common,
                     st.n_generated, st.prefill_ms, st.decode_tokens_per_s());
    } catch (const Error& e) {
      if (options.prompt) throw;
      history.pop_back();  // the turn is dropped; the conversation goes on
      cache->clear();      // and the cache may hold part of it
      cached.clear();
      std::fprintf(stderr, "error: %s\n", e.what());
    }
  }
}

}  // namespace endor::cli
