# compress_x_float: candidate, x gathered instead of codes expanded: vpcompressb of x over the mask, codes loaded as stored (cost only: lanes then mix x's blocks)
# Hand-written llvm-mca block (bench/word_costs/mca.sh): 4 rows x 2 words (8 row-words) an iteration,
# registers as the one-token kernel uses them: zmm16/zmm17 x of the two words, zmm18 the zero codes, zmm20-23 scratch.
kmovq 0(%r8), %k1
popcntq 0(%r8), %rcx
vpcompressb %zmm16, %zmm20 {%k1} {z}
vmovdqu8 (%r12), %zmm24
addq %rcx, %r12
vpxord %zmm4, %zmm4, %zmm4
vpdpbusd %zmm20, %zmm24, %zmm4
vcvtdq2ps %zmm4, %zmm4
vfmadd231ps %zmm19, %zmm4, %zmm0
kmovq 0(%r9), %k2
popcntq 0(%r9), %rcx
vpcompressb %zmm16, %zmm21 {%k2} {z}
vmovdqu8 (%r13), %zmm25
addq %rcx, %r13
vpxord %zmm5, %zmm5, %zmm5
vpdpbusd %zmm21, %zmm25, %zmm5
vcvtdq2ps %zmm5, %zmm5
vfmadd231ps %zmm19, %zmm5, %zmm1
kmovq 0(%r10), %k3
popcntq 0(%r10), %rcx
vpcompressb %zmm16, %zmm22 {%k3} {z}
vmovdqu8 (%r14), %zmm26
addq %rcx, %r14
vpxord %zmm6, %zmm6, %zmm6
vpdpbusd %zmm22, %zmm26, %zmm6
vcvtdq2ps %zmm6, %zmm6
vfmadd231ps %zmm19, %zmm6, %zmm2
kmovq 0(%r11), %k4
popcntq 0(%r11), %rcx
vpcompressb %zmm16, %zmm23 {%k4} {z}
vmovdqu8 (%r15), %zmm27
addq %rcx, %r15
vpxord %zmm7, %zmm7, %zmm7
vpdpbusd %zmm23, %zmm27, %zmm7
vcvtdq2ps %zmm7, %zmm7
vfmadd231ps %zmm19, %zmm7, %zmm3
kmovq 8(%r8), %k1
popcntq 8(%r8), %rcx
vpcompressb %zmm17, %zmm20 {%k1} {z}
vmovdqu8 (%r12), %zmm24
addq %rcx, %r12
vpxord %zmm4, %zmm4, %zmm4
vpdpbusd %zmm20, %zmm24, %zmm4
vcvtdq2ps %zmm4, %zmm4
vfmadd231ps %zmm19, %zmm4, %zmm0
kmovq 8(%r9), %k2
popcntq 8(%r9), %rcx
vpcompressb %zmm17, %zmm21 {%k2} {z}
vmovdqu8 (%r13), %zmm25
addq %rcx, %r13
vpxord %zmm5, %zmm5, %zmm5
vpdpbusd %zmm21, %zmm25, %zmm5
vcvtdq2ps %zmm5, %zmm5
vfmadd231ps %zmm19, %zmm5, %zmm1
kmovq 8(%r10), %k3
popcntq 8(%r10), %rcx
vpcompressb %zmm17, %zmm22 {%k3} {z}
vmovdqu8 (%r14), %zmm26
addq %rcx, %r14
vpxord %zmm6, %zmm6, %zmm6
vpdpbusd %zmm22, %zmm26, %zmm6
vcvtdq2ps %zmm6, %zmm6
vfmadd231ps %zmm19, %zmm6, %zmm2
kmovq 8(%r11), %k4
popcntq 8(%r11), %rcx
vpcompressb %zmm17, %zmm23 {%k4} {z}
vmovdqu8 (%r15), %zmm27
addq %rcx, %r15
vpxord %zmm7, %zmm7, %zmm7
vpdpbusd %zmm23, %zmm27, %zmm7
vcvtdq2ps %zmm7, %zmm7
vfmadd231ps %zmm19, %zmm7, %zmm3
addq $16, %r8
addq $16, %r9
addq $16, %r10
addq $16, %r11
cmpq %r8, %rbx
jne .Ltop
