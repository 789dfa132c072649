# multiply_only: one vpdpbusd a row-word into int32 accumulators (bench_word_costs' floor)
# Hand-written llvm-mca block (bench/word_costs/mca.sh): 4 rows x 2 words (8 row-words) an iteration,
# registers as the one-token kernel uses them: zmm16/zmm17 x of the two words, zmm18 the zero codes, zmm20-23 scratch.
vpdpbusd %zmm16, %zmm24, %zmm0
vpdpbusd %zmm16, %zmm25, %zmm1
vpdpbusd %zmm16, %zmm26, %zmm2
vpdpbusd %zmm16, %zmm27, %zmm3
vpdpbusd %zmm17, %zmm24, %zmm0
vpdpbusd %zmm17, %zmm25, %zmm1
vpdpbusd %zmm17, %zmm26, %zmm2
vpdpbusd %zmm17, %zmm27, %zmm3
addq $128, %rax
cmpq %rax, %rbx
jne .Ltop
