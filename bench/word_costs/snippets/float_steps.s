# float_steps: + per row-word a fresh int32 sum, its conversion and an fma by x's two block scales (zmm19)
# Hand-written llvm-mca block (bench/word_costs/mca.sh): 4 rows x 2 words (8 row-words) an iteration,
# registers as the one-token kernel uses them: zmm16/zmm17 x of the two words, zmm18 the zero codes, zmm20-23 scratch.
kmovq 0(%r8), %k1
popcntq 0(%r8), %rcx
vmovdqa64 %zmm18, %zmm20
vpexpandb (%r12), %zmm20 {%k1}
addq %rcx, %r12
vpxord %zmm4, %zmm4, %zmm4
vpdpbusd %zmm16, %zmm20, %zmm4
vcvtdq2ps %zmm4, %zmm4
vfmadd231ps %zmm19, %zmm4, %zmm0
kmovq 0(%r9), %k2
popcntq 0(%r9), %rcx
vmovdqa64 %zmm18, %zmm21
vpexpandb (%r13), %zmm21 {%k2}
addq %rcx, %r13
vpxord %zmm5, %zmm5, %zmm5
vpdpbusd %zmm16, %zmm21, %zmm5
vcvtdq2ps %zmm5, %zmm5
vfmadd231ps %zmm19, %zmm5, %zmm1
kmovq 0(%r10), %k3
popcntq 0(%r10), %rcx
vmovdqa64 %zmm18, %zmm22
vpexpandb (%r14), %zmm22 {%k3}
addq %rcx, %r14
vpxord %zmm6, %zmm6, %zmm6
vpdpbusd %zmm16, %zmm22, %zmm6
vcvtdq2ps %zmm6, %zmm6
vfmadd231ps %zmm19, %zmm6, %zmm2
kmovq 0(%r11), %k4
popcntq 0(%r11), %rcx
vmovdqa64 %zmm18, %zmm23
vpexpandb (%r15), %zmm23 {%k4}
addq %rcx, %r15
vpxord %zmm7, %zmm7, %zmm7
vpdpbusd %zmm16, %zmm23, %zmm7
vcvtdq2ps %zmm7, %zmm7
vfmadd231ps %zmm19, %zmm7, %zmm3
kmovq 8(%r8), %k1
popcntq 8(%r8), %rcx
vmovdqa64 %zmm18, %zmm20
vpexpandb (%r12), %zmm20 {%k1}
addq %rcx, %r12
vpxord %zmm4, %zmm4, %zmm4
vpdpbusd %zmm17, %zmm20, %zmm4
vcvtdq2ps %zmm4, %zmm4
vfmadd231ps %zmm19, %zmm4, %zmm0
kmovq 8(%r9), %k2
popcntq 8(%r9), %rcx
vmovdqa64 %zmm18, %zmm21
vpexpandb (%r13), %zmm21 {%k2}
addq %rcx, %r13
vpxord %zmm5, %zmm5, %zmm5
vpdpbusd %zmm17, %zmm21, %zmm5
vcvtdq2ps %zmm5, %zmm5
vfmadd231ps %zmm19, %zmm5, %zmm1
kmovq 8(%r10), %k3
popcntq 8(%r10), %rcx
vmovdqa64 %zmm18, %zmm22
vpexpandb (%r14), %zmm22 {%k3}
addq %rcx, %r14
vpxord %zmm6, %zmm6, %zmm6
vpdpbusd %zmm17, %zmm22, %zmm6
vcvtdq2ps %zmm6, %zmm6
vfmadd231ps %zmm19, %zmm6, %zmm2
kmovq 8(%r11), %k4
popcntq 8(%r11), %rcx
vmovdqa64 %zmm18, %zmm23
vpexpandb (%r15), %zmm23 {%k4}
addq %rcx, %r15
vpxord %zmm7, %zmm7, %zmm7
vpdpbusd %zmm17, %zmm23, %zmm7
vcvtdq2ps %zmm7, %zmm7
vfmadd231ps %zmm19, %zmm7, %zmm3
addq $16, %r8
addq $16, %r9
addq $16, %r10
addq $16, %r11
cmpq %r8, %rbx
jne .Ltop
