#include "trie.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace decide {
namespace {

using std::to_string;

void require(bool ok, const std::string& message) {
    if (!ok) throw std::invalid_argument(message);
}

void check_offsets(Int32View offsets, size_t total, const char* name) {
    require(offsets.size >= 1 && offsets[0] == 0, std::string(name) + " must start with 0");
    for (size_t i = 1; i < offsets.size; ++i)
        require(offsets[i - 1] <= offsets[i], std::string(name) + " must be non-decreasing (at index " +
                                                  to_string(i) + ")");
    require(static_cast<size_t>(offsets[offsets.size - 1]) == total,
            std::string(name) + " must end with the number of its elements (" + to_string(total) + ")");
}

void validate(const ForestInput& in) {
    check_offsets(in.prompts.offsets, in.prompts.tokens.size, "prompt_offsets");
    check_offsets(in.candidates.offsets, in.candidates.tokens.size, "cand_offsets");
    const size_t Q = in.prompts.count();
    require(Q >= 1, "a forest needs at least one prompt");
    require(in.question_cand_offsets.size == Q + 1, "question_cand_offsets must have one entry per prompt plus one");
    check_offsets(in.question_cand_offsets, in.candidates.count(), "question_cand_offsets");
    require(in.prefix_len >= 0, "prefix_len must be >= 0, got " + to_string(in.prefix_len));
    require(in.prompts.tokens.size + in.candidates.tokens.size < std::numeric_limits<int32_t>::max(),
            "too many tokens for int32 node indices");

    const int32_t* first = in.prompts.begin(0);
    for (size_t q = 0; q < Q; ++q) {
        const size_t len = in.prompts.length(q);
        require(static_cast<size_t>(in.prefix_len) < len,
                "prefix_len=" + to_string(in.prefix_len) + " leaves prompt " + to_string(q) + " (" + to_string(len) +
                    " tokens) without its last token; prefix_len must be at most the shortest prompt length - 1");
        require(std::equal(first, first + in.prefix_len, in.prompts.begin(q)),
                "prompt " + to_string(q) + " does not share the first prefix_len=" + to_string(in.prefix_len) +
                    " tokens of prompt 0");
        const size_t c0 = in.question_cand_offsets[q], c1 = in.question_cand_offsets[q + 1];
        require(c1 > c0, "question " + to_string(q) + " has no candidates");
        for (size_t c = c0; c < c1; ++c)
            require(in.candidates.length(c) > 0,
                    "candidate " + to_string(c) + " (question " + to_string(q) + ") is empty; every candidate "
                    "needs at least one token");
    }
}

// Children keyed by (parent, token); first insertion fixes a node's index.
class Trie {
   public:
    Trie(Forest& forest, size_t capacity) : f_(forest) {
        children_.reserve(capacity);
        f_.tokens.reserve(capacity);
        f_.parents.reserve(capacity);
        f_.positions.reserve(capacity);
        on_prompt_.reserve(capacity);
    }

    int32_t child(int32_t parent, int32_t token) {
        const auto next = static_cast<int32_t>(f_.tokens.size());
        const auto [it, inserted] = children_.try_emplace(key(parent, token), next);
        if (inserted) {
            f_.tokens.push_back(token);
            f_.parents.push_back(parent);
            f_.positions.push_back(parent < 0 ? f_.prefix_len : f_.positions[parent] + 1);
            on_prompt_.push_back(0);
        }
        return it->second;
    }

    void mark_prompt(int32_t node) { on_prompt_[node] = 1; }
    int64_t prompt_nodes() const { return std::count(on_prompt_.begin(), on_prompt_.end(), 1); }

   private:
    static uint64_t key(int32_t parent, int32_t token) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(parent + 1)) << 32) | static_cast<uint32_t>(token);
    }

    Forest& f_;
    std::unordered_map<uint64_t, int32_t> children_;
    std::vector<uint8_t> on_prompt_;
};

// Walks prompt q from prefix_len on. `path` holds the previous prompt's nodes by depth on entry and this prompt's
// on return; the part shared with the previous prompt is reused without lookups (prompts share long prefixes).
int32_t insert_prompt(Trie& trie, const ForestInput& in, size_t q, std::vector<int32_t>& path) {
    const int32_t* tokens = in.prompts.begin(q) + in.prefix_len;
    const size_t n = in.prompts.length(q) - in.prefix_len;
    size_t shared = 0;
    if (q > 0) {
        const int32_t* prev = in.prompts.begin(q - 1) + in.prefix_len;
        const size_t limit = std::min(n, path.size());
        shared = std::mismatch(tokens, tokens + limit, prev).first - tokens;
    }
    path.resize(shared);
    int32_t node = shared ? path.back() : -1;
    for (size_t d = shared; d < n; ++d) {
        node = trie.child(node, tokens[d]);
        trie.mark_prompt(node);
        path.push_back(node);
    }
    return node;
}

// Appends candidate c under `last` and records its (node, token) pairs: the node before each token.
void insert_candidate(Trie& trie, const ForestInput& in, size_t c, int32_t last, Forest& f,
                      std::vector<int32_t>& pair_nodes) {
    const int32_t* tokens = in.candidates.begin(c);
    int32_t node = last;
    for (size_t t = 0; t < in.candidates.length(c); ++t) {
        pair_nodes.push_back(node);
        f.pair_tokens.push_back(tokens[t]);
        node = trie.child(node, tokens[t]);
    }
    f.cand_pair_offsets.push_back(static_cast<int32_t>(f.pair_tokens.size()));
}

void assign_rows(Forest& f, const std::vector<int32_t>& pair_nodes) {
    std::vector<int32_t> row_of(f.tokens.size(), -1);
    for (int32_t node : pair_nodes) row_of[node] = 0;
    for (size_t node = 0; node < row_of.size(); ++node) {
        if (row_of[node] < 0) continue;
        row_of[node] = static_cast<int32_t>(f.rows.size());
        f.rows.push_back(static_cast<int32_t>(node));
    }
    f.pair_rows.resize(pair_nodes.size());
    for (size_t j = 0; j < pair_nodes.size(); ++j) f.pair_rows[j] = row_of[pair_nodes[j]];
}

// A row needs its logsumexp unless every question gathering there gathers there with all of its candidates:
// then the same -lse lands once on each of that question's log-likelihoods and cancels in its softmax.
void mark_lse_rows(Forest& f, Int32View question_cand_offsets) {
    const size_t R = f.rows.size();
    f.row_needs_lse.assign(R, 0);
    std::vector<int32_t> count(R, 0), seen_by(R, -1);
    for (size_t q = 0; q + 1 < question_cand_offsets.size; ++q) {
        const int32_t c0 = question_cand_offsets[q], c1 = question_cand_offsets[q + 1];
        const int32_t j0 = f.cand_pair_offsets[c0], j1 = f.cand_pair_offsets[c1];
        for (int32_t j = j0; j < j1; ++j) {
            const int32_t r = f.pair_rows[j];
            if (seen_by[r] != static_cast<int32_t>(q)) seen_by[r] = static_cast<int32_t>(q), count[r] = 0;
            ++count[r];
        }
        for (int32_t j = j0; j < j1; ++j)
            if (count[f.pair_rows[j]] != c1 - c0) f.row_needs_lse[f.pair_rows[j]] = 1;
    }
}

}  // namespace

Forest build_forest(const ForestInput& in) {
    validate(in);
    Forest f;
    f.prefix_len = static_cast<int32_t>(in.prefix_len);
    Trie trie(f, in.prompts.tokens.size / 4 + in.candidates.tokens.size + 16);
    std::vector<int32_t> path, pair_nodes;
    pair_nodes.reserve(in.candidates.tokens.size);
    f.pair_tokens.reserve(in.candidates.tokens.size);
    f.cand_pair_offsets.reserve(in.candidates.count() + 1);
    f.cand_pair_offsets.push_back(0);
    for (size_t q = 0; q < in.prompts.count(); ++q) {
        const int32_t last = insert_prompt(trie, in, q, path);
        f.prompt_last_nodes.push_back(last);
        for (int32_t c = in.question_cand_offsets[q]; c < in.question_cand_offsets[q + 1]; ++c)
            insert_candidate(trie, in, c, last, f, pair_nodes);
    }
    f.prompt_nodes = trie.prompt_nodes();
    assign_rows(f, pair_nodes);
    mark_lse_rows(f, in.question_cand_offsets);
    return f;
}

void ancestor_mask(Int32View parents, size_t start, size_t stop, uint8_t* out) {
    require(start <= stop && stop <= parents.size, "ancestor_mask needs 0 <= start <= stop <= number of nodes");
    for (size_t i = 0; i < stop; ++i)
        require(parents[i] >= -1 && parents[i] < static_cast<int32_t>(i),
                "parents must satisfy -1 <= parents[i] < i (node " + to_string(i) + ")");
    std::fill(out, out + (stop - start) * stop, uint8_t{0});
    for (size_t i = start; i < stop; ++i) {
        uint8_t* row = out + (i - start) * stop;
        const int32_t p = parents[i];
        if (p >= static_cast<int32_t>(start)) {
            // the parent's row is already complete: copy it (its ancestors are all < p)
            std::copy_n(out + (p - start) * stop, p + 1, row);
        } else {
            for (int32_t j = p; j >= 0; j = parents[j]) row[j] = 1;
        }
        row[i] = 1;
    }
}

}  // namespace decide
