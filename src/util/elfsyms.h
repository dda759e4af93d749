/* elfsyms.h - what ELF objects say of themselves: which of some function names a file
 * defines in its symbol tables (.symtab, else .dynsym), read from the file itself (a
 * program's own definitions bind its own calls whether or not they are exported); and
 * which loaded object carries a note, read from memory. */
#ifndef MRC_ELFSYMS_H
#define MRC_ELFSYMS_H

#include <stdint.h>

/* Bit i set when path defines names[i] (n <= 32) as a function; 0 when it defines none
 * or cannot be read (no symbol table: a stripped file keeps only .dynsym). Reads the
 * file through util/sys.h; never allocates through malloc. */
unsigned mrc_elf_defines(const char *path, const char *const *names, unsigned n);

/* The name of the first loaded object (the program: "the program") whose notes hold
 * one of owner's, of this type, or NULL. No system call. */
const char *mrc_elf_loaded_note(const char *owner, uint32_t type);

#endif
