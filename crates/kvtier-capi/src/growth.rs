//! The growth rule of the C API's structs: each starts with
//! `size_t struct_size`, the `sizeof` the caller was compiled with.  The
//! library reads (or, for structs it fills, writes) only the bytes inside
//! `struct_size`, so a caller built against an older, shorter layout keeps
//! working; fields it does not know take their defaults.

use super::boundary::Failure;
use kvtier_core::error::Error;

/// A struct under the growth rule: `repr(C)`, `Copy`, and starting with a
/// `usize` holding its `struct_size`.
pub(crate) trait Grows: Copy {
    /// The struct's name in the header, for error messages.
    const NAME: &'static str;
    /// Size of the first published layout: the smallest `struct_size`
    /// accepted.  Grows never shrink, so this stays as it is when fields
    /// are added (and `size_of::<Self>()` grows past it).
    const FIRST_LAYOUT_SIZE: usize;
    /// Sizes of the layouts published between the first and the current
    /// one (`size_of::<Self>()`); a `struct_size` must be one of the
    /// published sizes, so no field is ever read in part.
    const BETWEEN_LAYOUT_SIZES: &'static [usize] = &[];
}

/// Checks a caller's `struct_size` against the layouts this library knows.
fn check_size<T: Grows>(size: usize) -> Result<(), Failure> {
    let known = std::mem::size_of::<T>();
    if size != T::FIRST_LAYOUT_SIZE && size != known && !T::BETWEEN_LAYOUT_SIZES.contains(&size) {
        let mut sizes = vec![T::FIRST_LAYOUT_SIZE];
        sizes.extend_from_slice(T::BETWEEN_LAYOUT_SIZES);
        sizes.push(known);
        sizes.dedup();
        let sizes: Vec<String> = sizes.iter().map(|s| s.to_string()).collect();
        return Err(Error::InvalidArgument(format!(
            "{}.struct_size is {size}; this library takes {} bytes \
             (initialize the struct with its _default() function)",
            T::NAME,
            sizes.join(" or ")
        ))
        .into());
    }
    Ok(())
}

/// Reads the caller's struct at `ptr` under the growth rule: `default` when
/// `ptr` is NULL, else `default` overlaid with the first `struct_size`
/// bytes at `ptr` (the result's `struct_size` is this library's size).
///
/// # Safety
/// `ptr` NULL or valid for reads of its own `struct_size` bytes.
#[cfg_attr(not(test), allow(dead_code))] // for the options structs' readers
pub(crate) unsafe fn read_grown<T: Grows>(ptr: *const T, default: T) -> Result<T, Failure> {
    let mut value = default;
    if ptr.is_null() {
        return Ok(value);
    }
    // SAFETY: every grown struct starts with its usize struct_size.
    let size = unsafe { ptr.cast::<usize>().read_unaligned() };
    check_size::<T>(size)?;
    // SAFETY: `size` bytes are readable at `ptr` (the caller's layout) and
    // writable in `value` (size <= size_of::<T>()); a prefix of a `repr(C)`
    // struct of plain fields is copied field by field as laid out.
    unsafe {
        std::ptr::copy_nonoverlapping(ptr.cast::<u8>(), (&mut value as *mut T).cast::<u8>(), size);
        (&mut value as *mut T)
            .cast::<usize>()
            .write(std::mem::size_of::<T>());
    }
    Ok(value)
}

/// Writes `value` into the caller's struct at `ptr` under the growth rule:
/// only the first `struct_size` bytes (the caller's `struct_size` is kept).
///
/// # Safety
/// `ptr` valid for reads and writes of its own `struct_size` bytes.
#[allow(dead_code)] // for the statistics structs the library fills
pub(crate) unsafe fn write_grown<T: Grows>(
    ptr: *mut T,
    value: &T,
    name: &'static str,
) -> Result<(), Failure> {
    if ptr.is_null() {
        return Err(Failure::Null(name));
    }
    // SAFETY: every grown struct starts with its usize struct_size.
    let size = unsafe { ptr.cast::<usize>().read_unaligned() };
    check_size::<T>(size)?;
    let skip = std::mem::size_of::<usize>();
    // SAFETY: `size` bytes are writable at `ptr` and readable in `value`;
    // the caller's struct_size (the first field) stays.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (value as *const T).cast::<u8>().add(skip),
            ptr.cast::<u8>().add(skip),
            size - skip,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Old {
        struct_size: usize,
        a: u32,
    }

    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct New {
        struct_size: usize,
        a: u32,
        b: u64,
    }

    impl Grows for New {
        const NAME: &'static str = "new";
        const FIRST_LAYOUT_SIZE: usize = std::mem::size_of::<Old>();
    }

    const DEFAULT: New = New {
        struct_size: std::mem::size_of::<New>(),
        a: 1,
        b: 2,
    };

    #[test]
    fn an_older_layout_reads_its_fields_and_defaults_for_the_rest() {
        let old = Old {
            struct_size: std::mem::size_of::<Old>(),
            a: 7,
        };
        let got = unsafe { read_grown((&old as *const Old).cast::<New>(), DEFAULT) }.unwrap();
        assert_eq!(
            got,
            New {
                struct_size: std::mem::size_of::<New>(),
                a: 7,
                b: 2
            }
        );
    }

    #[test]
    fn the_current_layout_is_read_whole_and_null_is_the_default() {
        let mine = New {
            struct_size: std::mem::size_of::<New>(),
            a: 5,
            b: 6,
        };
        assert_eq!(unsafe { read_grown(&mine, DEFAULT) }.unwrap(), mine);
        assert_eq!(
            unsafe { read_grown(std::ptr::null(), DEFAULT) }.unwrap(),
            DEFAULT
        );
    }

    #[test]
    fn sizes_outside_the_known_layouts_are_refused() {
        for size in [
            0,
            std::mem::size_of::<Old>() - 1,
            // Inside the new layout: `b` would be read in part.
            std::mem::size_of::<Old>() + 4,
            std::mem::size_of::<New>() - 1,
            std::mem::size_of::<New>() + 1,
        ] {
            let bad = New {
                struct_size: size,
                a: 5,
                b: 6,
            };
            let err = unsafe { read_grown(&bad, DEFAULT) }.unwrap_err();
            assert!(
                matches!(err, Failure::Core(Error::InvalidArgument(_))),
                "{size}"
            );
            let mut out = bad;
            assert!(unsafe { write_grown(&mut out, &DEFAULT, "out") }.is_err());
            assert_eq!(out, bad, "nothing written for size {size}");
        }
    }

    #[test]
    fn an_older_output_struct_gets_only_its_own_fields() {
        #[repr(C)]
        struct Guarded {
            old: Old,
            guard: u64,
        }
        let mut g = Guarded {
            old: Old {
                struct_size: std::mem::size_of::<Old>(),
                a: 0,
            },
            guard: 0xdead_beef,
        };
        let value = New {
            struct_size: 999,
            a: 9,
            b: 10,
        };
        unsafe { write_grown((&mut g.old as *mut Old).cast::<New>(), &value, "out") }.unwrap();
        assert_eq!(g.old.a, 9);
        assert_eq!(g.old.struct_size, std::mem::size_of::<Old>());
        assert_eq!(g.guard, 0xdead_beef, "wrote past the caller's struct");
    }
}
