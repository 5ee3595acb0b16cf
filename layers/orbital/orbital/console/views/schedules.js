// PLACEHOLDER: replaced by the real view.
import { header } from "../ui.js";

export default {
  id: "schedules",
  title: "Schedules",
  icon: "schedules",
  mount(container) {
    container.append(header("Schedules"));
    return () => {};
  },
};
