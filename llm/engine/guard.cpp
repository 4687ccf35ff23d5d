// The llama.cpp calls a request can steer, behind a C++ try/catch.
//
// llama.cpp reports some errors by throwing C++ exceptions through its C API: a grammar
// whose stacks run empty while accepting a token ("Unexpected empty grammar stack"), a
// malformed grammar, invalid UTF-8 in the tokenizer. Called through ctypes there is no C++
// frame to catch them, so the runtime calls std::terminate and the whole server dies. These
// wrappers turn every exception into an error code and a message.
//
// Sampling with a grammar also never lets the grammar accept a token it did not allow: the
// grammar is applied first, a step in which it allows nothing is an error, and the token the
// rest of the chain picks must have survived the grammar. Accepting a forbidden end-of-
// generation token would otherwise reach a GGML_ABORT, which no try/catch can stop.
//
// It also holds the abort callback that lets a real request stop a prefetch's prefill
// mid-decode (``ragdesk_interrupted``).
//
// The prototypes below are the C ABI of llama.h (llama.cpp as vendored by the pinned
// llama-cpp-python); the header itself is not installed with the Python package.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <vector>

extern "C" {
struct llama_sampler;
struct llama_context;
struct llama_model;
struct llama_vocab;
typedef int32_t llama_token;
struct llama_token_data {
    llama_token id;
    float logit;
    float p;
};
struct llama_token_data_array {
    llama_token_data* data;
    size_t size;
    int64_t selected;
    bool sorted;
};

llama_token llama_sampler_sample(llama_sampler* smpl, llama_context* ctx, int32_t idx);
void llama_sampler_apply(llama_sampler* smpl, llama_token_data_array* cur_p);
void llama_sampler_accept(llama_sampler* smpl, llama_token token);
float* llama_get_logits_ith(llama_context* ctx, int32_t i);
const llama_model* llama_get_model(const llama_context* ctx);
const llama_vocab* llama_model_get_vocab(const llama_model* model);
int32_t llama_vocab_n_tokens(const llama_vocab* vocab);
llama_sampler* llama_sampler_init_grammar(const llama_vocab* vocab, const char* grammar_str,
                                          const char* grammar_root);
int32_t llama_tokenize(const llama_vocab* vocab, const char* text, int32_t text_len,
                       llama_token* tokens, int32_t n_tokens_max, bool add_special,
                       bool parse_special);
}

namespace {

constexpr llama_token kFailed = -1;
constexpr int32_t kTokenizeFailed = INT32_MIN;

void report(char* err, size_t err_len, const char* what) {
    if (err != nullptr && err_len > 0) {
        std::strncpy(err, what, err_len - 1);
        err[err_len - 1] = '\0';
    }
}

llama_token sample_with_grammar(llama_sampler* chain, llama_sampler* grammar, llama_context* ctx,
                                int32_t idx, char* err, size_t err_len) {
    const float* logits = llama_get_logits_ith(ctx, idx);
    if (logits == nullptr) {
        report(err, err_len, "no logits at this batch row");
        return kFailed;
    }
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
    thread_local std::vector<llama_token_data> candidates;
    candidates.resize(static_cast<size_t>(n_vocab));
    for (int32_t id = 0; id < n_vocab; ++id) {
        candidates[static_cast<size_t>(id)] = llama_token_data{id, logits[id], 0.0f};
    }
    llama_token_data_array cur{candidates.data(), candidates.size(), -1, false};

    llama_sampler_apply(grammar, &cur);
    bool allowed = false;
    for (size_t i = 0; i < cur.size && !allowed; ++i) {
        allowed = std::isfinite(cur.data[i].logit);
    }
    if (!allowed) {
        report(err, err_len, "the grammar allows no token at this point of the output");
        return kFailed;
    }
    llama_sampler_apply(chain, &cur);
    if (cur.selected < 0 || static_cast<size_t>(cur.selected) >= cur.size ||
        !std::isfinite(cur.data[cur.selected].logit)) {
        report(err, err_len, "no token the grammar allows could be sampled");
        return kFailed;
    }
    const llama_token token = cur.data[cur.selected].id;
    llama_sampler_accept(grammar, token);
    llama_sampler_accept(chain, token);
    return token;
}

}  // namespace

extern "C" {

// llama_set_abort_callback's callback: llama.cpp's CPU backend asks it between the nodes
// of a graph, and a true ends llama_decode with 2 and its batch's cells removed. ``flag``
// is an int32 another thread raises; a Python callback would take the GIL at every node.
bool ragdesk_interrupted(void* flag) {
    return __atomic_load_n(static_cast<const int32_t*>(flag), __ATOMIC_RELAXED) != 0;
}

// The next token at batch row ``idx``, accepted by ``chain`` (and ``grammar`` when not
// null; it must not be part of ``chain``), or -1 with ``err`` filled in.
llama_token ragdesk_sample(llama_sampler* chain, llama_sampler* grammar, llama_context* ctx,
                           int32_t idx, char* err, size_t err_len) {
    try {
        if (grammar == nullptr) {
            return llama_sampler_sample(chain, ctx, idx);
        }
        return sample_with_grammar(chain, grammar, ctx, idx, err, err_len);
    } catch (const std::exception& e) {
        report(err, err_len, e.what());
    } catch (...) {
        report(err, err_len, "llama.cpp raised an unknown exception while sampling");
    }
    return kFailed;
}

// A grammar sampler, or null with ``err`` filled in.
llama_sampler* ragdesk_init_grammar(const llama_vocab* vocab, const char* grammar,
                                    const char* root, char* err, size_t err_len) {
    try {
        llama_sampler* sampler = llama_sampler_init_grammar(vocab, grammar, root);
        if (sampler == nullptr) {
            report(err, err_len, "the grammar could not be compiled");
        }
        return sampler;
    } catch (const std::exception& e) {
        report(err, err_len, e.what());
    } catch (...) {
        report(err, err_len, "llama.cpp raised an unknown exception compiling the grammar");
    }
    return nullptr;
}

// llama_tokenize's result, or INT32_MIN with ``err`` filled in.
int32_t ragdesk_tokenize(const llama_vocab* vocab, const char* text, int32_t text_len,
                         llama_token* tokens, int32_t n_tokens_max, bool add_special,
                         bool parse_special, char* err, size_t err_len) {
    try {
        return llama_tokenize(vocab, text, text_len, tokens, n_tokens_max, add_special,
                              parse_special);
    } catch (const std::exception& e) {
        report(err, err_len, e.what());
    } catch (...) {
        report(err, err_len, "llama.cpp raised an unknown exception while tokenising");
    }
    return kTokenizeFailed;
}

}  // extern "C"
