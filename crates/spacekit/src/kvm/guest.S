# spacekit's dirtying guest (see layout.rs): 64-bit long mode, flat segments,
# memory identity-mapped with 2 MiB pages. Assembled with GNU as:
#   as --64 -o guest.o guest.S && objcopy -O binary -j .text guest.o guest.bin
# and kept as bytes in layout.rs (GUEST_CODE); a test re-assembles this file
# when `as` is present and compares.
#
# Entry: rsi = parameter page, rdi = this vCPU's 64-byte slot in it,
# rsp = the slot's end (the only stack use is `call next`).
# Parameters: [rsi] cmd (u32, nonzero = leave the guest), [rsi+4] workload
# (0 uniform, 1 hot, 2 sweep, 3 idle), [rsi+8] first page of the region,
# [rsi+16] pages in it, [rsi+24] hot pages, [rsi+32] hot threshold (of 2^64),
# [rsi+40] TSC ticks per write (0 = unpaced), [rsi+48] writes per vCPU (0 =
# no limit). Slot: [rdi] writes done, [rdi+8] xorshift64 state, [rdi+16]
# sweep position, [rdi+24] next TSC deadline.
.intel_syntax noprefix
.code64
.globl _start
_start:
top:
    mov eax, dword ptr [rsi]
    test eax, eax
    jnz paused
    mov rcx, qword ptr [rsi + 48]
    test rcx, rcx
    jz pace
    cmp qword ptr [rdi], rcx
    jae quota
pace:
    mov rcx, qword ptr [rsi + 40]
    test rcx, rcx
    jz pick
    rdtsc
    shl rdx, 32
    or rax, rdx
    mov rdx, qword ptr [rdi + 24]
    cmp rax, rdx
    jb top
    add rdx, rcx
    cmp rdx, rax
    jae 1f
    mov rdx, rax
1:  mov qword ptr [rdi + 24], rdx
pick:
    mov eax, dword ptr [rsi + 4]
    cmp eax, 2
    je sweep
    cmp eax, 3
    je idle
    mov rcx, qword ptr [rsi + 16]
    cmp eax, 1
    jne uniform
    call next
    cmp rax, qword ptr [rsi + 32]
    jae uniform
    mov rcx, qword ptr [rsi + 24]
uniform:
    call next
    mul rcx
    mov r8, rax
    jmp store
sweep:
    mov rdx, qword ptr [rdi + 16]
    lea rax, [rdx + 1]
    cmp rax, qword ptr [rsi + 16]
    jb 2f
    xor eax, eax
2:  mov qword ptr [rdi + 16], rax
    mov r8, qword ptr [rdi]
store:
    add rdx, qword ptr [rsi + 8]
    shl rdx, 12
    shr r8, 52
    add rdx, r8
    mov rax, qword ptr [rdi]
    inc rax
    mov byte ptr [rdx], al
    mov qword ptr [rdi], rax
    jmp top
idle:
    # Halt (the host sleeps a moment and resumes it) rather than spin: an
    # idle guest leaves its host core to the migration. `nop` keeps the
    # code the size it had with `pause`.
    hlt
    nop
    jmp top
paused:
    out 0x10, al
    jmp top
quota:
    out 0x11, al
    jmp top
next:
    mov rax, qword ptr [rdi + 8]
    mov rdx, rax
    shl rdx, 13
    xor rax, rdx
    mov rdx, rax
    shr rdx, 7
    xor rax, rdx
    mov rdx, rax
    shl rdx, 17
    xor rax, rdx
    mov qword ptr [rdi + 8], rax
    ret
