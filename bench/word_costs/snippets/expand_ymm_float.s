# expand_ymm_float: candidate, each word's codes expanded in two 256-bit halves (Zen 4 runs a 512-bit shuffle as two 256-bit ones)
# Hand-written llvm-mca block (bench/word_costs/mca.sh): 4 rows x 2 words (8 row-words) an iteration,
# registers as the one-token kernel uses them: zmm16/zmm17 x of the two words, zmm18 the zero codes, zmm20-23 scratch.
kmovd 0(%r8), %k1
kmovd 4(%r8), %k5
popcntl 0(%r8), %ecx
popcntq 0(%r8), %rdx
vmovdqa64 %zmm18, %zmm20
vpexpandb (%r12), %ymm20 {%k1}
vmovdqa64 %ymm18, %ymm28
vpexpandb (%r12,%rcx), %ymm28 {%k5}
vinserti64x4 $1, %ymm28, %zmm20, %zmm20
addq %rdx, %r12
vpxord %zmm4, %zmm4, %zmm4
vpdpbusd %zmm16, %zmm20, %zmm4
vcvtdq2ps %zmm4, %zmm4
vfmadd231ps %zmm19, %zmm4, %zmm0
kmovd 0(%r9), %k2
kmovd 4(%r9), %k5
popcntl 0(%r9), %ecx
popcntq 0(%r9), %rdx
vmovdqa64 %zmm18, %zmm21
vpexpandb (%r13), %ymm21 {%k2}
vmovdqa64 %ymm18, %ymm28
vpexpandb (%r13,%rcx), %ymm28 {%k5}
vinserti64x4 $1, %ymm28, %zmm21, %zmm21
addq %rdx, %r13
vpxord %zmm5, %zmm5, %zmm5
vpdpbusd %zmm16, %zmm21, %zmm5
vcvtdq2ps %zmm5, %zmm5
vfmadd231ps %zmm19, %zmm5, %zmm1
kmovd 0(%r10), %k3
kmovd 4(%r10), %k5
popcntl 0(%r10), %ecx
popcntq 0(%r10), %rdx
vmovdqa64 %zmm18, %zmm22
vpexpandb (%r14), %ymm22 {%k3}
vmovdqa64 %ymm18, %ymm28
vpexpandb (%r14,%rcx), %ymm28 {%k5}
vinserti64x4 $1, %ymm28, %zmm22, %zmm22
addq %rdx, %r14
vpxord %zmm6, %zmm6, %zmm6
vpdpbusd %zmm16, %zmm22, %zmm6
vcvtdq2ps %zmm6, %zmm6
vfmadd231ps %zmm19, %zmm6, %zmm2
kmovd 0(%r11), %k4
kmovd 4(%r11), %k5
popcntl 0(%r11), %ecx
popcntq 0(%r11), %rdx
vmovdqa64 %zmm18, %zmm23
vpexpandb (%r15), %ymm23 {%k4}
vmovdqa64 %ymm18, %ymm28
vpexpandb (%r15,%rcx), %ymm28 {%k5}
vinserti64x4 $1, %ymm28, %zmm23, %zmm23
addq %rdx, %r15
vpxord %zmm7, %zmm7, %zmm7
vpdpbusd %zmm16, %zmm23, %zmm7
vcvtdq2ps %zmm7, %zmm7
vfmadd231ps %zmm19, %zmm7, %zmm3
kmovd 8(%r8), %k1
kmovd 12(%r8), %k5
popcntl 8(%r8), %ecx
popcntq 8(%r8), %rdx
vmovdqa64 %zmm18, %zmm20
vpexpandb (%r12), %ymm20 {%k1}
vmovdqa64 %ymm18, %ymm28
vpexpandb (%r12,%rcx), %ymm28 {%k5}
vinserti64x4 $1, %ymm28, %zmm20, %zmm20
addq %rdx, %r12
vpxord %zmm4, %zmm4, %zmm4
vpdpbusd %zmm17, %zmm20, %zmm4
vcvtdq2ps %zmm4, %zmm4
vfmadd231ps %zmm19, %zmm4, %zmm0
kmovd 8(%r9), %k2
kmovd 12(%r9), %k5
popcntl 8(%r9), %ecx
popcntq 8(%r9), %rdx
vmovdqa64 %zmm18, %zmm21
vpexpandb (%r13), %ymm21 {%k2}
vmovdqa64 %ymm18, %ymm28
vpexpandb (%r13,%rcx), %ymm28 {%k5}
vinserti64x4 $1, %ymm28, %zmm21, %zmm21
addq %rdx, %r13
vpxord %zmm5, %zmm5, %zmm5
vpdpbusd %zmm17, %zmm21, %zmm5
vcvtdq2ps %zmm5, %zmm5
vfmadd231ps %zmm19, %zmm5, %zmm1
kmovd 8(%r10), %k3
kmovd 12(%r10), %k5
popcntl 8(%r10), %ecx
popcntq 8(%r10), %rdx
vmovdqa64 %zmm18, %zmm22
vpexpandb (%r14), %ymm22 {%k3}
vmovdqa64 %ymm18, %ymm28
vpexpandb (%r14,%rcx), %ymm28 {%k5}
vinserti64x4 $1, %ymm28, %zmm22, %zmm22
addq %rdx, %r14
vpxord %zmm6, %zmm6, %zmm6
vpdpbusd %zmm17, %zmm22, %zmm6
vcvtdq2ps %zmm6, %zmm6
vfmadd231ps %zmm19, %zmm6, %zmm2
kmovd 8(%r11), %k4
kmovd 12(%r11), %k5
popcntl 8(%r11), %ecx
popcntq 8(%r11), %rdx
vmovdqa64 %zmm18, %zmm23
vpexpandb (%r15), %ymm23 {%k4}
vmovdqa64 %ymm18, %ymm28
vpexpandb (%r15,%rcx), %ymm28 {%k5}
vinserti64x4 $1, %ymm28, %zmm23, %zmm23
addq %rdx, %r15
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
