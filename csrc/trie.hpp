// The token forest of a request: one trie over every prompt + candidate sequence.
// Plain C++17, no Python headers; csrc/bindings.cpp exposes it as decide._native.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace decide {

// A read-only view of int32 values (C++17 has no std::span).
struct Int32View {
    const int32_t* data = nullptr;
    size_t size = 0;

    int32_t operator[](size_t i) const { return data[i]; }
};

// Sequences in CSR form: sequence i is tokens[offsets[i] .. offsets[i + 1]).
struct Sequences {
    Int32View tokens;
    Int32View offsets;

    size_t count() const { return offsets.size == 0 ? 0 : offsets.size - 1; }
    size_t length(size_t i) const { return static_cast<size_t>(offsets[i + 1] - offsets[i]); }
    const int32_t* begin(size_t i) const { return tokens.data + offsets[i]; }
};

struct ForestInput {
    Sequences prompts;                 // Q full prompts
    Sequences candidates;              // C candidates, grouped by question in order
    Int32View question_cand_offsets;   // Q + 1: question q owns candidates [qco[q], qco[q + 1])
    int64_t prefix_len = 0;            // tokens already in the KV cache, shared by every prompt
};

// Nodes are in first-insertion order (prompt 0, its candidates, prompt 1's new nodes, ...), so parent < child.
struct Forest {
    int32_t prefix_len = 0;
    std::vector<int32_t> tokens;             // N
    std::vector<int32_t> parents;            // N, -1 = child of the cached prefix
    std::vector<int32_t> positions;          // N, prefix_len + depth
    std::vector<int32_t> rows;               // R ascending nodes whose logits row is needed
    std::vector<uint8_t> row_needs_lse;      // R
    std::vector<int32_t> pair_rows;          // M, index into rows
    std::vector<int32_t> pair_tokens;        // M
    std::vector<int32_t> cand_pair_offsets;  // C + 1
    std::vector<int32_t> prompt_last_nodes;  // Q
    int64_t prompt_nodes = 0;                // nodes on some prompt's path

    int64_t num_nodes() const { return static_cast<int64_t>(tokens.size()); }
    int64_t candidate_nodes() const { return num_nodes() - prompt_nodes; }
};

// Throws std::invalid_argument (with a sentence saying what is wrong) on malformed input.
Forest build_forest(const ForestInput& input);

// Rows [start, stop) of the ancestor-or-self mask over nodes [0, stop): out[(i - start) * stop + j] = 1 iff
// node j is node i or one of its ancestors. `out` holds (stop - start) * stop bytes and is fully written.
// Throws std::invalid_argument unless -1 <= parents[i] < i and 0 <= start <= stop <= parents.size.
void ancestor_mask(Int32View parents, size_t start, size_t stop, uint8_t* out);

}  // namespace decide
