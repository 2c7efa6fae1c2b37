/* mkmodel — synthetic Qwen3-TTS checkpoint generator (placeholder until issue 2 lands it). */
#include <stdio.h>
int main(void) { fprintf(stderr, "mkmodel: not implemented yet\n"); return 2; }
