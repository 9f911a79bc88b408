// Prints llama.cpp's kimi-k2 pre-tokenizer pieces of each input string
// (strings separated by "\n__ggml_vocab_test__\n"): one line per string,
// pieces as hex bytes separated by '|'.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
std::vector<std::string> unicode_regex_split(const std::string & text, const std::vector<std::string> & regex_exprs, bool byte_encode);
int main(int argc, char ** argv) {
    std::ifstream f(argv[1], std::ios::binary);
    std::stringstream ss; ss << f.rdbuf();
    std::string all = ss.str(), sep = "\n__ggml_vocab_test__\n";
    size_t p = 0;
    for (;;) {
        size_t q = all.find(sep, p);
        if (q == std::string::npos) break;
        std::string s = all.substr(p, q - p);
        auto pieces = unicode_regex_split(s, {"\\p{Han}+"}, false);
        for (size_t i = 0; i < pieces.size(); i++) {
            if (i) putchar('|');
            for (unsigned char c : pieces[i]) printf("%02x", c);
        }
        putchar('\n');
        p = q + sep.size();
    }
}
