/* cuvil_checks.h: the one interpreter of an entry's size-check program (backends/cpu/fastcall.py check_program),
 * shared by the Python fast path (backends/cpu/fastcall.c) and the standalone runtime (cuvil_runtime.c).
 *
 * The program is postfix code over a small stack: it reads each input's sizes (through the caller's `dim`
 * callback), binds the symbolic sizes, checks every size and relation, and yields the output sizes. Programs
 * from Python are well formed by construction; the runtime reads them from a file, so it first runs
 * cuvil_checks_verify, after which cuvil_run_checks never reads or writes out of bounds.
 */
#ifndef CUVIL_CHECKS_H
#define CUVIL_CHECKS_H

#include <stdint.h>

/* The instructions, in fastcall.py's OPCODES order. */
enum { CUVIL_OP_CONST, CUVIL_OP_SYM, CUVIL_OP_DIM, CUVIL_OP_ADD, CUVIL_OP_MUL, CUVIL_OP_FLOORDIV, CUVIL_OP_MOD,
       CUVIL_OP_EQ, CUVIL_OP_BIND, CUVIL_OP_OUT, CUVIL_OP_GE, CUVIL_OP_COUNT };
#define CUVIL_CHECK_STACK 32 /* fastcall.py refuses programs that need a deeper stack */

/* Per opcode: its name, how many operands follow it, how many stack values it pops and pushes (fastcall.py ARITY). */
static const struct { const char *name; int operands, pops, pushes; } cuvil_check_ops[CUVIL_OP_COUNT] = {
    {"const", 1, 0, 1}, {"sym", 1, 0, 1}, {"dim", 2, 0, 1}, {"add", 0, 2, 1}, {"mul", 0, 2, 1},
    {"floordiv", 0, 2, 1}, {"mod", 0, 2, 1}, {"eq", 0, 2, 0}, {"bind", 1, 1, 0}, {"out", 1, 1, 0}, {"ge", 0, 2, 0},
};

/* The size of axis `axis` of input `input`. */
typedef int64_t (*cuvil_dim_fn)(const void *ctx, int64_t input, int64_t axis);

static inline int64_t cuvil_floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

static inline int64_t cuvil_floormod(int64_t a, int64_t b)
{
    int64_t r = a % b;
    return (r != 0 && (r < 0) != (b < 0)) ? r + b : r;
}

/* Runs the program: 0 when every check holds (sym and out filled), else 1 + the index of the failing
 * instruction, with the two values it compared (or the negative output size) in why[0] and why[1]. */
static inline int cuvil_run_checks(const int64_t *c, int n_code, cuvil_dim_fn dim, const void *ctx, int64_t *sym,
                                   int64_t *out, int64_t why[2])
{
    int64_t st[CUVIL_CHECK_STACK];
    int sp = 0;
    for (int pc = 0; pc < n_code;) {
        int at = pc;
        switch (c[pc++]) {
        case CUVIL_OP_CONST: st[sp++] = c[pc++]; break;
        case CUVIL_OP_SYM: st[sp++] = sym[c[pc++]]; break;
        case CUVIL_OP_DIM: st[sp++] = dim(ctx, c[pc], c[pc + 1]); pc += 2; break;
        /* wrapping arithmetic: a hostile size overflows to a value the checks reject, never to undefined behaviour */
        case CUVIL_OP_ADD: sp--; st[sp - 1] = (int64_t)((uint64_t)st[sp - 1] + (uint64_t)st[sp]); break;
        case CUVIL_OP_MUL: sp--; st[sp - 1] = (int64_t)((uint64_t)st[sp - 1] * (uint64_t)st[sp]); break;
        case CUVIL_OP_FLOORDIV:
        case CUVIL_OP_MOD:
            sp--;
            if (st[sp] == 0 || (st[sp] == -1 && st[sp - 1] == INT64_MIN)) { why[0] = st[sp - 1]; why[1] = st[sp]; return at + 1; }
            st[sp - 1] = c[at] == CUVIL_OP_MOD ? cuvil_floormod(st[sp - 1], st[sp]) : cuvil_floordiv(st[sp - 1], st[sp]);
            break;
        case CUVIL_OP_EQ:
        case CUVIL_OP_GE:
            sp -= 2;
            if (c[at] == CUVIL_OP_EQ ? st[sp] != st[sp + 1] : st[sp] < st[sp + 1]) {
                why[0] = st[sp], why[1] = st[sp + 1];
                return at + 1;
            }
            break;
        case CUVIL_OP_BIND: sym[c[pc++]] = st[--sp]; break;
        case CUVIL_OP_OUT: if (st[--sp] < 0) { why[0] = why[1] = st[sp]; return at + 1; } out[c[pc++]] = st[sp]; break;
        default: return at + 1;
        }
    }
    return 0;
}

/* Whether a program read from a file is safe to run for entries with `n_in` inputs of `ranks`, `n_sym` symbols and
 * `n_out_dims` output sizes: every opcode known, every operand in range, the stack within bounds, each symbol bound
 * before it is read, each output size written exactly once. 0 if so, else 1 + the index of the bad instruction. */
static inline int cuvil_checks_verify(const int64_t *c, int n_code, int n_in, const int *ranks, int n_sym,
                                      int n_out_dims, uint8_t *bound, uint8_t *written)
{
    int sp = 0;
    for (int k = 0; k < n_sym; k++) bound[k] = 0;
    for (int k = 0; k < n_out_dims; k++) written[k] = 0;
    for (int pc = 0; pc < n_code;) {
        int at = pc;
        int64_t op = c[pc++];
        if (op < 0 || op >= CUVIL_OP_COUNT || pc + cuvil_check_ops[op].operands > n_code) return at + 1;
        const int64_t *a = c + pc;
        pc += cuvil_check_ops[op].operands;
        if (sp < cuvil_check_ops[op].pops) return at + 1;
        sp += cuvil_check_ops[op].pushes - cuvil_check_ops[op].pops;
        if (sp > CUVIL_CHECK_STACK) return at + 1;
        if ((op == CUVIL_OP_SYM && (a[0] < 0 || a[0] >= n_sym || !bound[a[0]]))
            || (op == CUVIL_OP_DIM && (a[0] < 0 || a[0] >= n_in || a[1] < 0 || a[1] >= ranks[a[0]]))
            || (op == CUVIL_OP_BIND && (a[0] < 0 || a[0] >= n_sym))
            || (op == CUVIL_OP_OUT && (a[0] < 0 || a[0] >= n_out_dims || written[a[0]])))
            return at + 1;
        if (op == CUVIL_OP_BIND) bound[a[0]] = 1;
        if (op == CUVIL_OP_OUT) written[a[0]] = 1;
    }
    for (int k = 0; k < n_sym; k++)
        if (!bound[k]) return n_code + 1;
    for (int k = 0; k < n_out_dims; k++)
        if (!written[k]) return n_code + 1;
    return 0;
}

#endif
