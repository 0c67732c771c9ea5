/* ext4 images: open, verify, free extents, files. Usage: ext4 IMAGE DIR
 * (IMAGE: a fresh mkfs.ext4 image; DIR: a scratch directory). The test
 * driver runs e2fsck -fn on IMAGE afterwards. */
#define _POSIX_C_SOURCE 200112L
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static void path_in(char *out, size_t cap, const char *dir, const char *name) {
    int n = snprintf(out, cap, "%s/%s", dir, name);
    CHECK(n > 0 && (size_t)n < cap);
}

/* Appends one ustar member (a regular file) of `name` and `data`. */
static void tar_member(FILE *f, const char *name, const char *data) {
    unsigned char h[512];
    unsigned sum = 0;
    size_t len = strlen(data), pad = (512 - len % 512) % 512;
    static const unsigned char zeros[512];
    memset(h, 0, sizeof h);
    CHECK(strlen(name) < 100);
    memcpy(h, name, strlen(name));
    memcpy(h + 100, "0000644", 8);
    memcpy(h + 108, "0000000", 8);
    memcpy(h + 116, "0000000", 8);
    snprintf((char *)h + 124, 12, "%011o", (unsigned)len);
    memcpy(h + 136, "00000000000", 12);
    memset(h + 148, ' ', 8);
    h[156] = '0';
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    for (size_t i = 0; i < sizeof h; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
    CHECK(fwrite(h, 1, sizeof h, f) == sizeof h);
    CHECK(fwrite(data, 1, len, f) == len);
    CHECK(fwrite(zeros, 1, pad, f) == pad);
}

int main(int argc, char **argv) {
    spacekit_ext4 *img = NULL;
    spacekit_ext4_geometry geo;
    spacekit_ext4_block_range ranges[64];
    spacekit_ext4_inode_stat st;
    spacekit_ext4_extent ext[8];
    size_t mismatches = 99, count = 0;
    uint32_t ino = 0, keep = 0, again = 0;
    uint64_t blocks = 0, free_before = 0;
    char path[4096], long_name[300];
    FILE *f;

    CHECK(argc == 3);

    /* bad opens */
    EXPECT(spacekit_ext4_open(NULL, false, &img), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_ext4_open(argv[1], false, NULL), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_ext4_open("/nonexistent/fs.img", false, &img), SPACEKIT_ERROR_IO);
    /* an image file name is bytes on Unix, UTF-8 or not */
    EXPECT(spacekit_ext4_open("/nonexistent/\xff\xfe.img", false, &img), SPACEKIT_ERROR_IO);
    path_in(path, sizeof path, argv[2], "latin1-\xe9t\xe9.img");
    CHECK(symlink(argv[1], path) == 0);
    OK(spacekit_ext4_open(path, false, &img));
    OK(spacekit_ext4_info(img, &geo));
    CHECK(geo.block_size == 1024 && geo.blocks_count == 8192);
    OK(spacekit_ext4_close(img));
    img = NULL;
    CHECK(unlink(path) == 0);
    path_in(path, sizeof path, argv[2], "zeros.img");
    f = fopen(path, "wb");
    CHECK(f != NULL);
    {
        static char zeros[65536];
        CHECK(fwrite(zeros, 1, sizeof zeros, f) == sizeof zeros);
    }
    CHECK(fclose(f) == 0);
    EXPECT(spacekit_ext4_open(path, false, &img), SPACEKIT_ERROR_CORRUPT);
    CHECK(img == NULL);

    /* read-only: look, change nothing */
    OK(spacekit_ext4_open(argv[1], false, &img));
    OK(spacekit_ext4_info(img, &geo));
    CHECK(geo.block_size == 1024 && geo.blocks_count == 8192 && geo.group_count == 1);
    CHECK(geo.free_blocks > 0 && geo.free_blocks < geo.blocks_count);
    CHECK(geo.inodes_count > 0 && geo.free_inodes > 0 && geo.inodes_per_group > 0);
    CHECK(geo.blocks_per_group == 8192);
    free_before = geo.free_blocks;
    EXPECT(spacekit_ext4_info(img, NULL), SPACEKIT_ERROR_NULL_POINTER);
    OK(spacekit_ext4_verify(img, &mismatches));
    CHECK(mismatches == 0);
    EXPECT(spacekit_ext4_verify(img, NULL), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_ext4_free_extents(img, 0, NULL, 0, &count), SPACEKIT_ERROR_BUFFER_TOO_SMALL);
    CHECK(count >= 1 && count <= 64);
    OK(spacekit_ext4_free_extents(img, 0, ranges, 64, &count));
    {
        uint64_t sum = 0;
        size_t i;
        for (i = 0; i < count; i++) {
            CHECK(ranges[i].first <= ranges[i].last);
            sum += ranges[i].last - ranges[i].first + 1;
        }
        CHECK(sum == free_before);
    }
    EXPECT(spacekit_ext4_free_extents(img, 1, ranges, 64, &count),
           SPACEKIT_ERROR_INVALID_ARGUMENT);
    EXPECT(spacekit_ext4_free_extents(img, 0, ranges, 64, NULL), SPACEKIT_ERROR_NULL_POINTER);
    OK(spacekit_ext4_lookup(img, "/", &ino));
    CHECK(ino == 2);
    OK(spacekit_ext4_lookup(img, "/lost+found", &ino));
    CHECK(ino == 11);
    EXPECT(spacekit_ext4_create(img, "/ro.bin", 0644, &ino), SPACEKIT_ERROR_READ_ONLY);
    EXPECT(spacekit_ext4_fallocate(img, 11, 0, 1024, false, NULL), SPACEKIT_ERROR_READ_ONLY);
    EXPECT(spacekit_ext4_truncate(img, 11, 0), SPACEKIT_ERROR_READ_ONLY);
    EXPECT(spacekit_ext4_unlink(img, "/lost+found"), SPACEKIT_ERROR_READ_ONLY);
    OK(spacekit_ext4_flush(img)); /* nothing to write */
    OK(spacekit_ext4_close(img));
    OK(spacekit_ext4_close(NULL));
    img = NULL;

    /* read-write: files */
    OK(spacekit_ext4_open(argv[1], true, &img));
    OK(spacekit_ext4_create(img, "/a.bin", 0644, &ino));
    CHECK(ino > 11);
    EXPECT(spacekit_ext4_create(img, "/a.bin", 0644, &again), SPACEKIT_ERROR_EXISTS);
    EXPECT(spacekit_ext4_create(img, "rel.bin", 0644, &again), SPACEKIT_ERROR_NOT_ABSOLUTE);
    EXPECT(spacekit_ext4_create(img, "/dir.bin", 0040755, &again),
           SPACEKIT_ERROR_INVALID_ARGUMENT);
    EXPECT(spacekit_ext4_create(img, "/x/\xff", 0644, &again), SPACEKIT_ERROR_INVALID_UTF8);
    EXPECT(spacekit_ext4_create(img, NULL, 0644, &again), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_ext4_create(img, "/b.bin", 0644, NULL), SPACEKIT_ERROR_NULL_POINTER);
    OK(spacekit_ext4_lookup(img, "/a.bin", &again));
    CHECK(again == ino);
    EXPECT(spacekit_ext4_lookup(img, "/nope", &again), SPACEKIT_ERROR_NO_ENTRY);
    EXPECT(spacekit_ext4_lookup(img, "/a.bin/x", &again), SPACEKIT_ERROR_NOT_A_DIRECTORY);
    EXPECT(spacekit_ext4_lookup(img, "a.bin", &again), SPACEKIT_ERROR_NOT_ABSOLUTE);
    memset(long_name, 'n', sizeof long_name);
    long_name[0] = '/';
    long_name[sizeof long_name - 1] = '\0';
    EXPECT(spacekit_ext4_lookup(img, long_name, &again), SPACEKIT_ERROR_NAME_TOO_LONG);
    EXPECT(spacekit_ext4_lookup(img, "/a.bin", NULL), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_ext4_lookup(NULL, "/a.bin", &again), SPACEKIT_ERROR_NULL_POINTER);

    /* fallocate 1 MiB, then stat */
    OK(spacekit_ext4_fallocate(img, ino, 0, 1 << 20, false, &blocks));
    CHECK(blocks == 1024);
    OK(spacekit_ext4_stat(img, ino, &st, ext, 8));
    CHECK(st.ino == ino && st.size == 1 << 20 && (st.mode & 0170000) == 0100000);
    CHECK((st.mode & 0777) == 0644 && st.links == 1);
    CHECK(st.extent_count >= 1 && st.extent_count <= 8);
    CHECK(ext[0].logical == 0 && ext[0].unwritten);
    {
        uint64_t mapped = 0;
        size_t i;
        for (i = 0; i < st.extent_count; i++)
            mapped += ext[i].len;
        CHECK(mapped == 1024);
        CHECK(st.blocks >= 2048);
    }
    OK(spacekit_ext4_stat(img, ino, &st, NULL, 0)); /* counts only */
    CHECK(st.extent_count >= 1);
    EXPECT(spacekit_ext4_stat(img, ino, NULL, NULL, 0), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_ext4_stat(img, ino, &st, NULL, 4), SPACEKIT_ERROR_NULL_POINTER);
    EXPECT(spacekit_ext4_stat(img, 0, &st, NULL, 0), SPACEKIT_ERROR_INVALID_ARGUMENT);

    EXPECT(spacekit_ext4_fallocate(img, ino, 0, 0, false, NULL), SPACEKIT_ERROR_INVALID_ARGUMENT);
    EXPECT(spacekit_ext4_fallocate(img, ino, UINT64_MAX - 10, 100, false, NULL),
           SPACEKIT_ERROR_FILE_TOO_BIG);
    EXPECT(spacekit_ext4_fallocate(img, 2, 0, 1024, false, NULL),
           SPACEKIT_ERROR_NOT_A_REGULAR_FILE);
    EXPECT(spacekit_ext4_fallocate(img, ino, 1 << 20, (uint64_t)100 << 20, false, NULL),
           SPACEKIT_ERROR_NO_SPACE);
    EXPECT(spacekit_ext4_fallocate(NULL, ino, 0, 1, false, NULL), SPACEKIT_ERROR_NULL_POINTER);

    /* truncate to 4 KiB: the tail is freed */
    OK(spacekit_ext4_truncate(img, ino, 4096));
    OK(spacekit_ext4_stat(img, ino, &st, ext, 8));
    CHECK(st.size == 4096 && st.extent_count >= 1 && st.extent_count <= 4);
    {
        unsigned mapped = 0;
        size_t i;
        for (i = 0; i < st.extent_count; i++)
            mapped += ext[i].len;
        CHECK(mapped == 4);
    }
    EXPECT(spacekit_ext4_truncate(img, ino, UINT64_MAX), SPACEKIT_ERROR_FILE_TOO_BIG);
    EXPECT(spacekit_ext4_truncate(img, 2, 0), SPACEKIT_ERROR_NOT_A_REGULAR_FILE);
    EXPECT(spacekit_ext4_truncate(NULL, ino, 0), SPACEKIT_ERROR_NULL_POINTER);

    /* a second file kept, the first removed */
    OK(spacekit_ext4_create(img, "/keep.bin", 0600, &keep));
    OK(spacekit_ext4_fallocate(img, keep, 0, 64 << 10, true, &blocks));
    CHECK(blocks == 64);
    OK(spacekit_ext4_stat(img, keep, &st, NULL, 0));
    CHECK(st.size == 0); /* keep_size */
    OK(spacekit_ext4_unlink(img, "/a.bin"));
    EXPECT(spacekit_ext4_unlink(img, "/a.bin"), SPACEKIT_ERROR_NO_ENTRY);
    EXPECT(spacekit_ext4_unlink(img, "/lost+found"), SPACEKIT_ERROR_NOT_A_REGULAR_FILE);
    EXPECT(spacekit_ext4_unlink(img, "rel"), SPACEKIT_ERROR_NOT_ABSOLUTE);
    EXPECT(spacekit_ext4_unlink(img, NULL), SPACEKIT_ERROR_NULL_POINTER);

    OK(spacekit_ext4_verify(img, &mismatches));
    CHECK(mismatches == 0);
    OK(spacekit_ext4_flush(img));
    EXPECT(spacekit_ext4_flush(NULL), SPACEKIT_ERROR_NULL_POINTER);
    OK(spacekit_ext4_info(img, &geo));
    CHECK(geo.free_blocks == free_before - 64);
    OK(spacekit_ext4_close(img));
    img = NULL;

    /* what was flushed is there on reopen */
    OK(spacekit_ext4_open(argv[1], false, &img));
    OK(spacekit_ext4_lookup(img, "/keep.bin", &again));
    CHECK(again == keep);
    EXPECT(spacekit_ext4_lookup(img, "/a.bin", &again), SPACEKIT_ERROR_NO_ENTRY);
    OK(spacekit_ext4_stat(img, keep, &st, ext, 8));
    CHECK(st.extent_count >= 1 && st.extent_count <= 8 && ext[0].unwritten);
    OK(spacekit_ext4_verify(img, &mismatches));
    CHECK(mismatches == 0);
    OK(spacekit_ext4_close(img));

    /* contents, every kind of inode, extended attributes; each block the
       flushed image cannot see is written as soon as its operation ends */
    OK(spacekit_ext4_open(argv[1], true, &img));
    OK(spacekit_ext4_set_cache_budget(img, 1));
    EXPECT(spacekit_ext4_set_cache_budget(NULL, 1), SPACEKIT_ERROR_NULL_POINTER);
    uint32_t dir = 0, file = 0, link = 0, fifo = 0;
    OK(spacekit_ext4_mkdir(img, "/dir", 0750, &dir));
    CHECK(dir > 11);
    OK(spacekit_ext4_create(img, "/dir/f", 0644, &file));
    static const char text[] = "written through the C ABI\n";
    OK(spacekit_ext4_write(img, file, 5000, (const uint8_t *)text, sizeof text - 1));
    uint8_t back[64] = {0};
    size_t n = 0;
    OK(spacekit_ext4_read(img, file, 4998, back, sizeof back, &n));
    CHECK(n == sizeof text - 1 + 2 && back[0] == 0 && back[1] == 0);
    CHECK(memcmp(back + 2, text, sizeof text - 1) == 0);
    OK(spacekit_ext4_read(img, file, 1 << 20, back, sizeof back, &n));
    CHECK(n == 0);
    EXPECT(spacekit_ext4_read(img, file, 0, back, sizeof back, NULL), SPACEKIT_ERROR_NULL_POINTER);
    OK(spacekit_ext4_symlink(img, "/dir/l", "f", &link));
    char target[8] = {0};
    OK(spacekit_ext4_read_link(img, link, (uint8_t *)target, sizeof target, &n));
    CHECK(n == 1 && target[0] == 'f');
    OK(spacekit_ext4_link(img, "/dir/f", "/f2"));
    OK(spacekit_ext4_rename(img, "/f2", "/f3"));
    OK(spacekit_ext4_mknod(img, "/fifo", 'p', 0, 0, 0600, &fifo));
    EXPECT(spacekit_ext4_mknod(img, "/x", 'q', 0, 0, 0600, NULL), SPACEKIT_ERROR_INVALID_ARGUMENT);
    OK(spacekit_ext4_chmod(img, file, 0600));
    OK(spacekit_ext4_chown(img, file, 100000, 100001));
    OK(spacekit_ext4_set_xattr(img, file, "user.note", (const uint8_t *)"hi", 2));
    uint8_t val[8] = {0};
    OK(spacekit_ext4_get_xattr(img, file, "user.note", val, sizeof val, &n));
    CHECK(n == 2 && val[0] == 'h' && val[1] == 'i');
    OK(spacekit_ext4_remove_xattr(img, file, "user.note"));
    EXPECT(spacekit_ext4_get_xattr(img, file, "user.note", val, sizeof val, &n), SPACEKIT_ERROR_NO_ENTRY);
    EXPECT(spacekit_ext4_remove_xattr(img, file, "user.note"), SPACEKIT_ERROR_NO_ENTRY);
    EXPECT(spacekit_ext4_rmdir(img, "/dir"), SPACEKIT_ERROR_INVALID_ARGUMENT);
    OK(spacekit_ext4_mkdir(img, "/empty", 0755, NULL));
    OK(spacekit_ext4_rmdir(img, "/empty"));
    OK(spacekit_ext4_flush(img));
    OK(spacekit_ext4_close(img));
    OK(spacekit_ext4_open(argv[1], false, &img));
    OK(spacekit_ext4_lookup(img, "/f3", &again));
    CHECK(again == file);
    OK(spacekit_ext4_read(img, file, 5000, back, sizeof back, &n));
    CHECK(n == sizeof text - 1 && memcmp(back, text, n) == 0);
    OK(spacekit_ext4_verify(img, &mismatches));
    CHECK(mismatches == 0);

    /* the tree copied out to the host (rdump), read-only */
    {
        spacekit_ext4_export_report rep;
        struct stat a, b;
        char out[4096], f_path[4096], f3_path[4096], link_target[8];
        memset(&rep, 0xEE, sizeof rep);
        path_in(out, sizeof out, argv[2], "export");
        CHECK(mkdir(out, 0755) == 0);
        OK(spacekit_ext4_export_tree(img, "/", out, false, true, &rep));
        /* lost+found and dir; keep.bin and dir/f (also f3) */
        CHECK(rep.dirs == 2 && rep.files == 2 && rep.hard_links == 1);
        CHECK(rep.symlinks == 1 && rep.fifos == 1 && rep.devices == 0 && rep.sockets == 0);
        CHECK(rep.bytes == 5000 + sizeof text - 1 && rep.skipped == 0);
        CHECK(rep.owners_set == (geteuid() == 0));
        path_in(f_path, sizeof f_path, out, "dir/f");
        path_in(f3_path, sizeof f3_path, out, "f3");
        CHECK(stat(f_path, &a) == 0 && stat(f3_path, &b) == 0);
        CHECK(a.st_ino == b.st_ino && a.st_nlink == 2); /* one inode, two names */
        CHECK(a.st_size == 5000 + (off_t)sizeof text - 1 && (a.st_mode & 07777) == 0600);
        CHECK(geteuid() != 0 || (a.st_uid == 100000 && a.st_gid == 100001));
        path_in(path, sizeof path, out, "dir/l");
        CHECK(readlink(path, link_target, sizeof link_target) == 1 && link_target[0] == 'f');
        path_in(path, sizeof path, out, "fifo");
        CHECK(stat(path, &a) == 0 && S_ISFIFO(a.st_mode));
        /* an existing entry is never replaced; no destination; NULLs */
        EXPECT(spacekit_ext4_export_tree(img, "/dir", out, false, true, NULL), SPACEKIT_ERROR_EXISTS);
        EXPECT(spacekit_ext4_export_tree(img, "/dir", "/nonexistent/dest", false, true, NULL),
               SPACEKIT_ERROR_IO);
        EXPECT(spacekit_ext4_export_tree(img, "/nope", out, true, false, NULL), SPACEKIT_ERROR_NO_ENTRY);
        EXPECT(spacekit_ext4_export_tree(img, NULL, out, false, true, NULL), SPACEKIT_ERROR_NULL_POINTER);
        EXPECT(spacekit_ext4_export_tree(img, "/", NULL, false, true, NULL), SPACEKIT_ERROR_NULL_POINTER);
        EXPECT(spacekit_ext4_export_tree(NULL, "/", out, false, true, NULL), SPACEKIT_ERROR_NULL_POINTER);

        /* the exported tree built back in under /again, root-owned and
           clamped (rdump's inverse, mke2fs -d into an existing image) */
        {
            spacekit_ext4_populate_options po;
            spacekit_ext4_populate_report pr;
            uint32_t again_f, again_f3;
            memset(&po, 0, sizeof po);
            memset(&pr, 0xEE, sizeof pr);
            po.set_owner = true;
            po.set_clamp = true;
            po.clamp = 1000000000;
            OK(spacekit_ext4_close(img));
            OK(spacekit_ext4_open(argv[1], true, &img));
            OK(spacekit_ext4_mkdir(img, "/again", 0755, NULL));
            OK(spacekit_ext4_flush(img));
            OK(spacekit_ext4_populate_dir(img, "/again", out, &po, &pr));
            CHECK(pr.dirs == 2 && pr.files == 2 && pr.hard_links == 1 && pr.symlinks == 1);
            CHECK(pr.nodes == 1 && pr.bytes == 5000 + sizeof text - 1);
            OK(spacekit_ext4_lookup(img, "/again/dir/f", &again_f));
            OK(spacekit_ext4_lookup(img, "/again/f3", &again_f3));
            CHECK(again_f == again_f3);
            OK(spacekit_ext4_read(img, again_f, 5000, back, sizeof back, &n));
            CHECK(n == sizeof text - 1 && memcmp(back, text, n) == 0);
            /* a second time every name is taken: nothing is added */
            EXPECT(spacekit_ext4_populate_dir(img, "/again", out, &po, NULL), SPACEKIT_ERROR_EXISTS);
            EXPECT(spacekit_ext4_populate_dir(img, "/nope", out, NULL, NULL), SPACEKIT_ERROR_NO_ENTRY);
            EXPECT(spacekit_ext4_populate_dir(img, "/again", "/nonexistent/src", NULL, NULL),
                   SPACEKIT_ERROR_IO);
            EXPECT(spacekit_ext4_populate_tar(img, "/again", "/nonexistent.tar", NULL, NULL),
                   SPACEKIT_ERROR_IO);
            EXPECT(spacekit_ext4_populate_dir(img, NULL, out, NULL, NULL), SPACEKIT_ERROR_NULL_POINTER);
            EXPECT(spacekit_ext4_populate_dir(NULL, "/", out, NULL, NULL), SPACEKIT_ERROR_NULL_POINTER);
            OK(spacekit_ext4_verify(img, &mismatches));
            CHECK(mismatches == 0);
        }

        /* a tar that gives one path twice: the later member wins, and the
           report counts one replacement */
        {
            static const unsigned char end[1024];
            spacekit_ext4_populate_report pr;
            char tar_path[4096];
            uint32_t twice;
            FILE *f;
            path_in(tar_path, sizeof tar_path, argv[2], "twice.tar");
            CHECK((f = fopen(tar_path, "wb")) != NULL);
            tar_member(f, "twice", "first");
            tar_member(f, "twice", "second!");
            CHECK(fwrite(end, 1, sizeof end, f) == sizeof end);
            CHECK(fclose(f) == 0);
            memset(&pr, 0xEE, sizeof pr);
            OK(spacekit_ext4_mkdir(img, "/tar", 0755, NULL));
            OK(spacekit_ext4_populate_tar(img, "/tar", tar_path, NULL, &pr));
            CHECK(pr.files == 2 && pr.replaced == 1 && pr.dirs == 0 && pr.hard_links == 0);
            CHECK(pr.symlinks == 0 && pr.nodes == 0 && pr.xattrs == 0 && pr.bytes == 5 + 7);
            OK(spacekit_ext4_lookup(img, "/tar/twice", &twice));
            OK(spacekit_ext4_read(img, twice, 0, back, sizeof back, &n));
            CHECK(n == 7 && memcmp(back, "second!", 7) == 0);
            OK(spacekit_ext4_verify(img, &mismatches));
            CHECK(mismatches == 0);
        }
    }
    OK(spacekit_ext4_close(img));

    printf("ext4: ok\n");
    return 0;
}
