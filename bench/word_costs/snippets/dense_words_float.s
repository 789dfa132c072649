# dense_words_float: candidate, a bitmap row re-encoded dense at load time (absent = the zero code): a 64-byte code load replaces mask, popcount and expand
# Hand-written llvm-mca block (bench/word_costs/mca.sh): 4 rows x 2 words (8 row-words) an iteration,
# registers as the one-token kernel uses them: zmm16/zmm17 x of the two words, zmm19 x's block scales, zmm20-27 codes.
vmovdqu64 0(%r12), %zmm20
vpxord %zmm4, %zmm4, %zmm4
vpdpbusd %zmm16, %zmm20, %zmm4
vcvtdq2ps %zmm4, %zmm4
vfmadd231ps %zmm19, %zmm4, %zmm0
vmovdqu64 0(%r13), %zmm21
vpxord %zmm5, %zmm5, %zmm5
vpdpbusd %zmm16, %zmm21, %zmm5
vcvtdq2ps %zmm5, %zmm5
vfmadd231ps %zmm19, %zmm5, %zmm1
vmovdqu64 0(%r14), %zmm22
vpxord %zmm6, %zmm6, %zmm6
vpdpbusd %zmm16, %zmm22, %zmm6
vcvtdq2ps %zmm6, %zmm6
vfmadd231ps %zmm19, %zmm6, %zmm2
vmovdqu64 0(%r15), %zmm23
vpxord %zmm7, %zmm7, %zmm7
vpdpbusd %zmm16, %zmm23, %zmm7
vcvtdq2ps %zmm7, %zmm7
vfmadd231ps %zmm19, %zmm7, %zmm3
vmovdqu64 64(%r12), %zmm24
vpxord %zmm8, %zmm8, %zmm8
vpdpbusd %zmm17, %zmm24, %zmm8
vcvtdq2ps %zmm8, %zmm8
vfmadd231ps %zmm19, %zmm8, %zmm0
vmovdqu64 64(%r13), %zmm25
vpxord %zmm9, %zmm9, %zmm9
vpdpbusd %zmm17, %zmm25, %zmm9
vcvtdq2ps %zmm9, %zmm9
vfmadd231ps %zmm19, %zmm9, %zmm1
vmovdqu64 64(%r14), %zmm26
vpxord %zmm10, %zmm10, %zmm10
vpdpbusd %zmm17, %zmm26, %zmm10
vcvtdq2ps %zmm10, %zmm10
vfmadd231ps %zmm19, %zmm10, %zmm2
vmovdqu64 64(%r15), %zmm27
vpxord %zmm11, %zmm11, %zmm11
vpdpbusd %zmm17, %zmm27, %zmm11
vcvtdq2ps %zmm11, %zmm11
vfmadd231ps %zmm19, %zmm11, %zmm3
addq $128, %r12
addq $128, %r13
addq $128, %r14
addq $128, %r15
cmpq %r12, %rbx
jne .Ltop
