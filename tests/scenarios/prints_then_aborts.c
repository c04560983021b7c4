/* Prints one line with stdio, then aborts (SIGABRT) without flushing.
 * With stdout redirected to a pipe or file the line sits in stdio's buffer and is
 * lost; on a terminal stdio line-buffers and the line is written before abort(). */
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    printf("line printed before abort\n");
    abort();
    return 0;
}
